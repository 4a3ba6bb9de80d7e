// The terminal guard (guard.c): restores a caller's terminal modes when the
// process relaying it (hutch) dies without doing so.
#ifndef HUTCH_GUARD_H
#define HUTCH_GUARD_H

// argv[0] of the guard: its arguments are the saved and the raw modes, in
// hex (the kernel's struct termios); fd 0 is the terminal, fd 3 the read
// end of the relaying process's pipe.
#define HUTCH_GUARD_MAGIC "hutch:ttyguard"

// The size of the kernel's struct termios, as the guard reads it.
int hutch_guard_termios_len(void);

#endif
