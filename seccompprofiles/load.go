package seccompprofiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/store"
)

// LoadOptions say which filter a sandbox runs under.
type LoadOptions struct {
	// Profile is "" or DefaultSource for the built-in profile, or the path
	// of a Docker/OCI-format profile.
	Profile string
	// Notify compiles with user notification (see Options.Notify).
	Notify bool
	// WatchNetwork adds WatchNetwork's rules (needs Notify).
	WatchNetwork bool
	// Strict refuses a profile with syscall names this system does not
	// know (Options.Strict).
	Strict bool
	// Ptrace allows the tracing calls (AllowPtrace).
	Ptrace bool
	// FakeChown makes the chown calls succeed without effect (FakeChown:
	// an image build's run step).
	FakeChown bool
	// HostNetwork restricts socket(2) for a sandbox on the host's network
	// (HostNetwork: the landlock isolation).
	HostNetwork bool
	// Store keeps compiled filters; nil compiles every time.
	Store *store.Store
	// Logger receives debug records of hits and misses; nil discards them.
	Logger *slog.Logger
}

// entryFormat changes whenever an entry's meaning or layout does.
const entryFormat = "hutch-seccomp-v4\x00"

// Load returns the compiled filter of o's profile: from the store when it
// holds an intact entry of the same profile bytes, options, kernel and hutch
// binary, else compiled and stored. Compiling the default profile costs a
// fresh process milliseconds (parsing, validating, libseccomp); a hit costs
// a file read. Only profiles that parsed and compiled are stored, so a
// malformed file is always parsed and reported.
//
// An entry holds the program and, after it, the denial tables; a hit decodes
// only the program, and the tables (JSON reflection set-up in a fresh
// process) when a command first hits a denial (LoadTablesLazily).
func Load(ctx context.Context, o LoadOptions) (*Filter, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var ptraceKept string
	if o.Ptrace && !kernelAtLeast(PtraceMinKernel) {
		o.Ptrace = false
		ptraceKept = fmt.Sprintf("seccomp.ptrace has no effect on this kernel: before Linux %s a tracer can get around the seccomp filter, so ptrace stays with the profile", PtraceMinKernel)
	}
	name := o.Profile
	var raw []byte
	if name == "" || name == DefaultSource {
		name, raw = DefaultSource, defaultJSON
	} else {
		b, err := ReadFile(name)
		if err != nil {
			return nil, err // it names the profile
		}
		raw = b
	}
	key := entryKey(raw, o)
	if b, _, err := o.Store.Get(store.Seccomp, key); err == nil {
		if f, err := decodeEntry(b); err == nil {
			log.DebugContext(ctx, "seccomp filter cache hit", "key", key, "instructions", f.Instructions())
			return withWarning(f, ptraceKept), nil
		} else {
			log.DebugContext(ctx, "seccomp filter cache entry unusable, recompiling", "key", key, "error", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.DebugContext(ctx, "seccomp filter cache unreadable", "error", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var prof *Profile
	if name == DefaultSource {
		prof = Default()
	} else {
		var err error
		if prof, err = Parse(raw, name); err != nil {
			return nil, err
		}
	}
	if o.WatchNetwork {
		prof = WatchNetwork(prof)
	}
	if o.Ptrace {
		prof = AllowPtrace(prof)
	}
	if o.HostNetwork {
		prof = HostNetwork(prof)
	}
	if o.FakeChown {
		prof = FakeChown(prof)
	}
	f, err := Compile(prof, Options{Notify: o.Notify, Strict: o.Strict})
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", name, err)
	}
	log.DebugContext(ctx, "seccomp filter compiled", "key", key, "instructions", f.Instructions(), "notify", f.Notify)
	// Where notification was asked for but fell back, compile again next
	// time: the reason is reported on every start and is not stored.
	if f.NotifyUnavailable == "" {
		if b, err := encodeEntry(f); err == nil {
			if err := o.Store.Put(store.Seccomp, key, b); err != nil {
				log.DebugContext(ctx, "seccomp filter cache not written", "error", err)
			}
		}
	}
	return withWarning(f, ptraceKept), nil
}

// withWarning adds w, when there is one, to f's warnings.
func withWarning(f *Filter, w string) *Filter {
	if w != "" {
		f.Warnings = append(f.Warnings, w)
	}
	return f
}

// entryKey names the entry of raw compiled with o: the profile's bytes, the
// options, the kernel (which syscalls exist, includes and excludes by
// version, notification support) and this hutch binary (its libseccomp and
// compiler) all key it.
func entryKey(raw []byte, o LoadOptions) string {
	h := sha256.New()
	h.Write([]byte(entryFormat))
	fmt.Fprintf(h, "%d:", len(raw))
	h.Write(raw)
	fmt.Fprintf(h, "\x00notify=%v watch=%v strict=%v ptrace=%v fakechown=%v\x00", o.Notify, o.WatchNetwork, o.Strict, o.Ptrace, o.FakeChown)
	if o.HostNetwork {
		h.Write([]byte("hostnet\x00")) // only then: the keys of existing entries stay valid
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Write(u.Release[:])
		h.Write(u.Version[:])
	}
	maj, min, mic := seccomp.GetLibraryVersion()
	fmt.Fprintf(h, "\x00libseccomp=%d.%d.%d", maj, min, mic)
	// /proc/self/exe, not the name: the MCP server image runs from a
	// memfd, dated like the binary that carried it (cmd/hutch/mcp_image.go).
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat("/proc/self/exe"); err == nil {
			fmt.Fprintf(h, "\x00%s\x00%d\x00%d", exe, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// An entry: entryFormat, a notify byte, the program's length (u32, little
// endian) and SHA-256, the program (struct sock_filter[]), then the tables
// as JSON (entryTables).
const entryHead = len(entryFormat) + 1 + 4 + sha256.Size

// entryTables is the part of a Filter besides its program, stored compactly:
// denials once, in evaluation order, with their reasons deduplicated.
type entryTables struct {
	ProfileHash   string        `json:"profileHash"`
	Arch          string        `json:"arch"`
	DefaultAction string        `json:"defaultAction"`
	DefaultErrno  int           `json:"defaultErrno"`
	Warnings      []string      `json:"warnings,omitempty"`
	Unknown       []string      `json:"unknown,omitempty"`
	Reasons       []string      `json:"reasons"`
	Denials       []entryDenial `json:"denials"`
}

type entryDenial struct {
	Nr      uint32 `json:"n"`
	Name    string `json:"s"`
	Errno   int    `json:"e"`
	Reason  int    `json:"r"`
	Args    []Arg  `json:"a,omitempty"`
	Quiet   bool   `json:"q,omitempty"`
	Default bool   `json:"d,omitempty"`
}

func encodeEntry(f *Filter) ([]byte, error) {
	t := entryTables{ProfileHash: f.ProfileHash, Arch: f.Arch, DefaultAction: f.DefaultAction,
		DefaultErrno: f.DefaultErrno, Warnings: f.Warnings, Unknown: f.Unknown}
	reasons := map[string]int{}
	nrs := make([]uint32, 0, len(f.DenialRules))
	for nr := range f.DenialRules {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	for _, nr := range nrs {
		for _, d := range f.DenialRules[nr] {
			r, ok := reasons[d.Reason]
			if !ok {
				r = len(t.Reasons)
				reasons[d.Reason] = r
				t.Reasons = append(t.Reasons, d.Reason)
			}
			t.Denials = append(t.Denials, entryDenial{Nr: nr, Name: d.Name, Errno: d.Errno, Reason: r, Args: d.Args, Quiet: d.Quiet, Default: d.Default})
		}
	}
	tables, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, entryHead+len(f.BPF)+len(tables))
	b = append(b, entryFormat...)
	b = append(b, boolByte(f.Notify))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(f.BPF)))
	sum := sha256.Sum256(f.BPF)
	b = append(b, sum[:]...)
	b = append(b, f.BPF...)
	return append(b, tables...), nil
}

// decodeEntry reads an entry's program; its tables are decoded on the
// filter's first Lookup.
func decodeEntry(b []byte) (*Filter, error) {
	if len(b) < entryHead || !bytes.HasPrefix(b, []byte(entryFormat)) {
		return nil, errors.New("corrupt entry: no header")
	}
	p := len(entryFormat)
	notify := b[p] == 1
	n := int(binary.LittleEndian.Uint32(b[p+1:]))
	sum := b[p+5 : entryHead]
	if n == 0 || n%bpfInsnSize != 0 || len(b) < entryHead+n {
		return nil, errors.New("corrupt entry: no whole BPF program")
	}
	bpf := b[entryHead : entryHead+n]
	if got := sha256.Sum256(bpf); !bytes.Equal(got[:], sum) {
		return nil, errors.New("corrupt entry: BPF checksum mismatch")
	}
	tables := b[entryHead+n:]
	f := &Filter{BPF: bpf, Notify: notify}
	f.LoadTablesLazily(func() (*Filter, error) { return decodeTables(tables) })
	return f, nil
}

func decodeTables(b []byte) (*Filter, error) {
	var t entryTables
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("corrupt entry: %w", err)
	}
	f := &Filter{ProfileHash: t.ProfileHash, Arch: t.Arch, DefaultAction: t.DefaultAction, DefaultErrno: t.DefaultErrno,
		Warnings: t.Warnings, Unknown: t.Unknown, Denials: map[uint32]Denial{}, DenialRules: map[uint32][]Denial{}}
	for _, c := range t.Denials {
		if c.Reason < 0 || c.Reason >= len(t.Reasons) {
			return nil, fmt.Errorf("corrupt entry: reason %d of %d", c.Reason, len(t.Reasons))
		}
		d := Denial{Name: c.Name, Errno: c.Errno, Reason: t.Reasons[c.Reason], Args: c.Args, Quiet: c.Quiet, Default: c.Default}
		if _, ok := f.Denials[c.Nr]; !ok {
			f.Denials[c.Nr] = d
		}
		f.DenialRules[c.Nr] = append(f.DenialRules[c.Nr], d)
	}
	return f, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
