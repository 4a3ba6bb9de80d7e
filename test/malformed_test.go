package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// malformed is one bad input: hutch with args must exit with code and
// print want on stderr (a substring: the message naming the file, key or
// flag and what would be valid), nothing on stdout (but seccomp show's
// rules), and leave the workspace as it found it.
type malformed struct {
	name string
	args []string
	code int
	want string
}

// TestMalformedInput is the table of issue 18: policy files, flags, seccomp
// profiles and session names that hutch must refuse clearly, with the
// documented exit status (README, exit status: 125 for run and exec setup
// errors; 1 for policy check and show; 2 for policy check and session stop
// used wrongly).
func TestMalformedInput(t *testing.T) {
	ws := userDir(t)
	dir := userDir(t) // the policy files and profiles
	session := startSession(t, ws, "--no-discover")
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		writeUserFile(t, path, content)
		return path
	}
	// pol is `policy check` of a policy file with content: exit 1, the
	// message "FILE:" followed by want.
	pol := func(name, content, want string) malformed {
		path := file(name, content)
		return malformed{"policy check " + name, []string{"policy", "check", path}, 1, path + ":" + want}
	}
	// prof is `hutch run` with a seccomp profile: exit 125.
	prof := func(name, content, want string) malformed {
		path := file(name, content)
		return malformed{"run --seccomp-profile " + name, []string{"run", "--no-discover", "--seccomp-profile", path, "--", "true"}, 125,
			"hutch: cannot set up the sandbox: seccomp profile " + path + ": " + want}
	}
	run := func(args ...string) []string { return append([]string{"run", "--no-discover"}, args...) }
	exec := func(args ...string) []string { return append(append([]string{"exec"}, args...), session, "--", "true") }

	const timeoutWant = `must be at least 1ms, e.g. 30s or 10m`
	const cwdWant = `resolves to %s, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`
	cwd := func(c, to string) string { return `cwd "` + c + `" ` + strings.Replace(cwdWant, "%s", to, 1) }
	const nameWant = `want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit`

	cases := []malformed{
		// --timeout: non-positive and sub-millisecond timeouts, run and exec alike.
		{"run --timeout -1s", run("--timeout", "-1s", "--", "true"), 125, `hutch: --timeout -1s: ` + timeoutWant},
		{"run --timeout 0s", run("--timeout", "0s", "--", "true"), 125, `hutch: --timeout 0s: ` + timeoutWant},
		{"run --timeout 999us", run("--timeout", "999us", "--", "true"), 125, `hutch: --timeout 999us: ` + timeoutWant},
		{"exec --timeout -1s", exec("--timeout", "-1s"), 125, `hutch: --timeout -1s: ` + timeoutWant},
		{"exec --timeout 0s", exec("--timeout", "0s"), 125, `hutch: --timeout 0s: ` + timeoutWant},
		{"exec --timeout 999us", exec("--timeout", "999us"), 125, `hutch: --timeout 999us: ` + timeoutWant},
		{"exec --json --timeout 0", exec("--json", "--timeout", "0"), 125, `hutch: --timeout 0: ` + timeoutWant},

		// --cwd outside the workspace: the message of MCP's cwd.
		{"run --cwd ../..", run("--cwd", "../..", "--", "true"), 125, "hutch: " + cwd("../..", "/")},
		{"run --cwd /etc", run("--cwd", "/etc", "--", "true"), 125, "hutch: " + cwd("/etc", "/etc")},
		{"run --json --cwd /workspace/../tmp", run("--json", "--cwd", "/workspace/../tmp", "--", "true"), 125, "hutch: " + cwd("/workspace/../tmp", "/tmp")},
		{"exec --cwd ../..", exec("--cwd", "../.."), 125, "hutch: " + cwd("../..", "/")},
		{"exec --cwd /etc", exec("--cwd", "/etc"), 125, "hutch: " + cwd("/etc", "/etc")},
		{"exec --fresh --cwd ..", exec("--fresh", "--cwd", ".."), 125, "hutch: " + cwd("..", "/")},

		// Session names: "" is refused by start as by exec and stop.
		{"session start --name ''", []string{"session", "start", "--name", ""}, 125, `hutch: session name "": ` + nameWant},
		{"exec ''", []string{"exec", "", "--", "true"}, 125, `hutch: session name "": ` + nameWant},
		{"session stop ''", []string{"session", "stop", ""}, 1, `hutch: session name "": ` + nameWant},
		{"session start --name -x", []string{"session", "start", "--name", "-x"}, 125, `hutch: session name "-x": ` + nameWant},
		{"session start --name a/b", []string{"session", "start", "--name", "a/b"}, 125, `hutch: session name "a/b": ` + nameWant},
		{"session start --name (65 characters)", []string{"session", "start", "--name", strings.Repeat("a", 65)}, 125, `hutch: session name "` + strings.Repeat("a", 65) + `": ` + nameWant},
		{"session start --name ../x", []string{"session", "start", "--name", "../x"}, 125, `hutch: session name "../x": ` + nameWant},
		{"exec 'bad name'", []string{"exec", "bad name", "--", "true"}, 125, `hutch: session name "bad name": ` + nameWant},
		{"exec é", []string{"exec", "é", "--", "true"}, 125, `hutch: session name "é": ` + nameWant},
		{"exec a session that does not run", []string{"exec", "nosuch", "--", "true"}, 125, `hutch: no session named "nosuch" is running (start one with: hutch session start --name nosuch; list them with: hutch session ls)`},
		{"session stop a session that does not run", []string{"session", "stop", "nosuch"}, 1, `hutch: no session named "nosuch" is running`},
		{"session stop without a name", []string{"session", "stop"}, 2, `hutch: usage: hutch session stop NAME`},
		{"session stop two names", []string{"session", "stop", "a", "b"}, 2, `hutch: usage: hutch session stop NAME`},
		{"session unknown subcommand", []string{"session", "bogus"}, 125, `hutch: unknown command "bogus" for hutch session: want one of start, ls, ps, logs, kill, stop (see hutch session --help)`},

		// Review mode's commands.
		{"diff without an id", []string{"diff"}, 2, `hutch: usage: hutch diff [--json] [--stat] ID [PATH...]`},
		{"diff a change set that does not exist", []string{"diff", "nosuch"}, 1, `hutch: change set nosuch: no such change set (hutch changes lists them)`},
		{"diff a bad id", []string{"diff", "../x"}, 1, `hutch: change set id "../x": want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{"apply a change set that does not exist", []string{"apply", "nosuch"}, 1, `hutch: change set nosuch: no such change set`},
		{"discard without an id", []string{"discard"}, 2, `hutch: usage: hutch discard ID`},
		{"run --review=x", run("--review=x", "--", "true"), 125, `hutch: invalid boolean value "x" for --review`},

		// The command line of run and exec.
		{"no command", []string{"run"}, 125, `hutch: no command given: usage: hutch run [flags] -- COMMAND [ARG...]`},
		{"unknown command", []string{"bogus"}, 125, `hutch: unknown command "bogus" for hutch: want one of run, exec, session, mcp, plan, doctor, policy, seccomp, cache, image, diff, apply, discard, changes (see hutch --help)`},
		{"unknown flag", run("--bogus", "--", "true"), 125, `hutch: flag provided but not defined: --bogus (see hutch run --help)`},
		{"--pids not a number", run("--pids", "abc", "--", "true"), 125, `hutch: invalid value "abc" for flag --pids: want a whole number (see hutch run --help)`},
		{"--cpus not a number", run("--cpus", "x", "--", "true"), 125, `hutch: invalid value "x" for flag --cpus: want a number, e.g. 0.5 (see hutch run --help)`},
		{"--debug=x", run("--debug=x", "--", "true"), 125, `hutch: invalid boolean value "x" for --debug: a switch, true or false (--debug or --debug=false) (see hutch run --help)`},
		{"--timeout abc", run("--timeout", "abc", "--", "true"), 125, `hutch: --timeout: bad duration "abc": want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)`},
		{"--timeout 10", run("--timeout", "10", "--", "true"), 125, `hutch: --timeout: bad duration "10": want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)`},
		{"--timeout overflow", run("--timeout", "9999999999h", "--", "true"), 125, `hutch: --timeout: bad duration "9999999999h": too large: durations go up to 2562047h (about 292 years)`},
		{"exec --timeout abc", exec("--timeout", "abc"), 125, `hutch: --timeout: bad duration "abc": want a number with a unit ms, s, m or h`},
		{"--memory 12XB", run("--memory", "12XB", "--", "true"), 125, `hutch: --memory: bad size "12XB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"--memory 1MiB", run("--memory", "1MiB", "--", "true"), 125, `hutch: --memory 1MiB: resources.memory: must be at least 16MiB, not 1MiB`},
		{"--tmp-size lots", run("--tmp-size", "lots", "--", "true"), 125, `hutch: --tmp-size: bad size "lots": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"--tmp-size 1KiB", run("--tmp-size", "1KiB", "--", "true"), 125, `hutch: --tmp-size 1KiB: filesystem.tmp_size: must be at least 1MiB, not 1KiB`},
		{"--net open", run("--net", "open", "--", "true"), 125, `hutch: --net "open": the network mode must be "proxy" or "none"`},
		{"--pids 0", run("--pids", "0", "--", "true"), 125, `hutch: --pids 0: resources.pids: must be between 1 and 4194304, not 0`},
		{"--pids too many", run("--pids", "99999999", "--", "true"), 125, `hutch: --pids 99999999: resources.pids: must be between 1 and 4194304, not 99999999`},
		{"--cpus 0", run("--cpus", "0", "--", "true"), 125, `hutch: --cpus 0: resources.cpus: must be more than 0 and at most 1024, not 0`},
		{"--cpus -1", run("--cpus", "-1", "--", "true"), 125, `hutch: --cpus -1: resources.cpus: must be more than 0 and at most 1024, not -1`},
		{"two bad flags", run("--pids", "0", "--memory", "1MiB", "--", "true"), 125, "hutch: --memory 1MiB: resources.memory: must be at least 16MiB, not 1MiB\n--pids 0: resources.pids: must be between 1 and 4194304, not 0"},
		{"--allow=", run("--allow=", "--", "true"), 125, `hutch: --allow "": want HOST or HOST:PORT, e.g. pkgs.example.com:443`},
		{"--allow bad port", run("--allow", "a.example.com:99999", "--", "true"), 125, `hutch: --allow "a.example.com:99999": port "99999": want a number 1..65535`},
		{"--allow port not a number", run("--allow", "a.example.com:x", "--", "true"), 125, `hutch: --allow "a.example.com:x": port "x": want a number 1..65535`},
		{"--allow without a host", run("--allow", "=192.0.2.1", "--", "true"), 125, `hutch: --allow "": want HOST or HOST:PORT, e.g. pkgs.example.com:443`},
		{"--allow bad address", run("--allow", "a.example.com=notanip", "--", "true"), 125, `hutch: --allow "a.example.com=notanip": network.allow[0].addresses[0]: want an IPv4 or IPv6 address (no brackets, ports or zones), not "notanip"`},
		{"--allow wildcard TLD", run("--allow", "*.com", "--", "true"), 125, `hutch: --allow "*.com": network.allow[0].host: "*.com" is not a valid wildcard: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"--allow range", run("--allow", "10.0.0.0/8", "--", "true"), 125, `hutch: --allow "10.0.0.0/8": network.allow[0].host: "10.0.0.0/8": address ranges are not supported`},
		{"--allow wildcard pinned", run("--allow", "*.example.com=192.0.2.1", "--", "true"), 125, `hutch: --allow "*.example.com=192.0.2.1": network.allow[0].addresses: cannot pin a wildcard host "*.example.com" to addresses; name the host exactly`},
		{"--ro-bind=", run("--ro-bind=", "--", "true"), 125, `hutch: --ro-bind "": want SRC or SRC:DST with absolute paths`},
		{"--ro-bind :/data", run("--ro-bind", ":/data", "--", "true"), 125, `hutch: --ro-bind ":/data": want SRC or SRC:DST with absolute paths`},
		{"--ro-bind over /proc", run("--ro-bind", "/usr:/proc/x", "--", "true"), 125, `hutch: --ro-bind "/usr:/proc/x": filesystem.read_only[0].target: cannot bind over /proc/x: /proc and everything beneath it are hutch's`},
		{"--ro-bind relative target", run("--ro-bind", "/usr:data", "--", "true"), 125, `hutch: --ro-bind "/usr:data": filesystem.read_only[0].target: must be an absolute path inside the sandbox (or empty for the source's path), not "data"`},
		{"--ro-bind over /workspace", run("--ro-bind", "/usr:/workspace", "--", "true"), 125, `hutch: --ro-bind "/usr:/workspace": filesystem.read_only[0].target: cannot bind over /workspace: /workspace and everything beneath it are hutch's`},
		{"--ro-bind over /home", run("--ro-bind", "/usr:/home", "--", "true"), 125, `hutch: --ro-bind "/usr:/home": filesystem.read_only[0].target: cannot bind over /home: /home/sandbox is a tmpfs of its own (binds beneath it are fine)`},
		{"--ro-bind missing source", run("--ro-bind", "/nonexistent-src", "--", "true"), 125, `/nonexistent-src`},
		{"--tooling docker", run("--tooling", "docker", "--", "true"), 125, `hutch: --tooling docker: filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "docker"`},
		{"--tooling rootfs: missing", run("--tooling", "rootfs:/nonexistent-root", "--", "true"), 125, `hutch: cannot set up the sandbox: tooling rootfs /nonexistent-root: `},
		{"--workspace missing", run("--workspace", "/nonexistent-ws", "--", "true"), 125, `hutch: cannot set up the sandbox: workspace /nonexistent-ws: lstat /nonexistent-ws: no such file or directory (pass an existing directory with --workspace)`},
		{"--workspace a file", run("--workspace", file("not-a-dir", "x"), "--", "true"), 125, `not a directory (pass a directory with --workspace)`},
		{"--workspace /", run("--workspace", "/", "--", "true"), 125, `hutch: cannot set up the sandbox: workspace /: refusing to expose the whole host root read-write; pass a project directory with --workspace`},
		{"--env bad name", run("--env", "1BAD=x", "--", "true"), 125, `hutch: --env "1BAD=x": want NAME=VALUE or NAME, where NAME is letters, digits and _ not starting with a digit`},
		{"--env empty name", run("--env", "=x", "--", "true"), 125, `hutch: --env "=x": want NAME=VALUE or NAME`},
		{"exec --env bad name", exec("--env", "A-B=x"), 125, `hutch: --env "A-B=x": want NAME=VALUE or NAME`},
		{"exec option after the name", []string{"exec", session, "--timeout", "5s", "--", "true"}, 125, `hutch: exec option --timeout after the session name: put options first: hutch exec [--timeout D] [--env K=V] [--cwd DIR] [--fresh] [--detach] NAME -- COMMAND [ARG...]`},
		{"exec without a command", []string{"exec", session}, 125, `hutch: usage: hutch exec NAME [--] COMMAND [ARG...]`},
		{"exec without a command after --", []string{"exec", session, "--"}, 125, `hutch: usage: hutch exec NAME [--] COMMAND [ARG...]`},
		{"--policy missing", run("--policy", "/nonexistent.toml", "--", "true"), 125, `hutch: policy file /nonexistent.toml: no such file or directory`},
		{"--policy /dev/zero", run("--policy", "/dev/zero", "--", "true"), 125, `hutch: policy file /dev/zero is a character device, not a regular file: pass a file of at most 1MiB`},
		{"--policy a directory", run("--policy", dir, "--", "true"), 125, `hutch: policy file ` + dir + ` is a directory, not a regular file: pass a file of at most 1MiB`},
		{"--policy too large", run("--policy", file("big.toml", "# "+strings.Repeat("x", 1<<20)+"\n"), "--", "true"), 125, `big.toml is larger than 1MiB, the most hutch reads`},
		{"--security-log where none can be", run("--security-log", "/proc/nope/security.log", "--", "true"), 125, `hutch: security log /proc/nope/security.log: create directory: `},
		{"mcp with an argument", []string{"mcp", "extra"}, 125, `hutch: mcp takes no arguments (the agent sends the commands); see hutch mcp --help`},
		{"mcp --max-output 0", []string{"mcp", "--max-output", "0"}, 125, `hutch: --max-output "0": want a size from 1B to 1GiB, e.g. 256KiB`},
		{"mcp --max-output 2GiB", []string{"mcp", "--max-output", "2GiB"}, 125, `hutch: --max-output "2GiB": want a size from 1B to 1GiB, e.g. 256KiB`},
		{"mcp --max-output lots", []string{"mcp", "--max-output", "lots"}, 125, `hutch: --max-output "lots": want a size from 1B to 1GiB, e.g. 256KiB`},
		{"mcp --env bad name", []string{"mcp", "--env", "1X=y"}, 125, `hutch: --env "1X=y": want NAME=VALUE or NAME`},
		{"mcp --timeout 0s", []string{"mcp", "--timeout", "0s"}, 125, `hutch: --timeout 0s: ` + timeoutWant},

		// policy check and show.
		{"policy check without a file", []string{"policy", "check"}, 2, `hutch: usage: hutch policy check FILE`},
		{"policy check two files", []string{"policy", "check", "a", "b"}, 2, `hutch: usage: hutch policy check FILE`},
		{"policy check missing", []string{"policy", "check", "/nonexistent.toml"}, 1, `hutch: policy file /nonexistent.toml: no such file or directory`},
		{"policy check /dev/zero", []string{"policy", "check", "/dev/zero"}, 1, `hutch: policy file /dev/zero is a character device, not a regular file: pass a file of at most 1MiB`},
		{"policy show --memory 1MiB", []string{"policy", "show", "--memory", "1MiB"}, 1, `hutch: --memory 1MiB: resources.memory: must be at least 16MiB, not 1MiB`},
		{"policy show --policy missing", []string{"policy", "show", "--policy", "/nonexistent.toml"}, 1, `hutch: policy file /nonexistent.toml: no such file or directory`},
		{"policy unknown subcommand", []string{"policy", "bogus"}, 125, `hutch: unknown command "bogus" for hutch policy: want one of show, check (see hutch policy --help)`},

		// Policy files: syntax.
		pol("syntax.toml", "[filesystem\n", `1: expected ']' to close table name`),
		pol("no-value.toml", "version = \n", `1: unexpected character U+000A at start of value`),
		pol("two-values.toml", "version = 1 1\n", `1: expected newline but got U+0031 '1'`),
		pol("newline-in-string.toml", "[sandbox]\nhostname = \"abc\n", `2: basic strings cannot have new lines`),
		pol("bad-escape.toml", "[sandbox]\nhostname = \"a\\qb\"\n", `2: invalid escape character U+0071 'q'`),
		pol("non-ascii-key.toml", "ключ = 1\n", `1: invalid character at start of key: U+043A 'к': a bare key has only ASCII letters, digits, "_" and "-"; quote any other: "ключ" = ...`),
		pol("set-twice.toml", "version = 1\nversion = 1\n", `2: version: set twice: a key may appear only once`),
		pol("table-twice.toml", "[sandbox]\nuid = 5\n[sandbox]\ngid = 5\n", `3: sandbox: set twice: a key may appear only once`),
		pol("dotted-past-a-value.toml", "sandbox.uid.x = 1\n", `1: sandbox.uid: want an integer, found a table`),
		// Unknown keys.
		pol("unknown-top.toml", "versoin = 1\n", `1: unknown key "versoin" (valid top-level keys: version, enforcement, sandbox, filesystem, resources, network, lifecycle, environment, seccomp)`),
		pol("unknown-table.toml", "[filesystm]\n", `1: unknown key "filesystm" (valid top-level keys: `),
		pol("unknown-in-table.toml", "[filesystem]\ntmpsize = \"1GiB\"\n", `2: unknown key "filesystem.tmpsize" (valid keys in [filesystem]: tooling, workspace, workspace_at, protected, read_only, tmp_size, home_size, shm_size, sys, default_caches, cache, review)`),
		pol("unknown-in-entry.toml", "[[network.allow]]\nhost = \"a.example.com\"\nreason = \"r\"\nport = 443\n", `4: unknown key "network.allow[0].port" (valid keys in [[network.allow]]: host, ports, addresses, reason)`),
		pol("unknown-in-bind.toml", "[[filesystem.read_only]]\nsrc = \"/srv\"\n", `2: unknown key "filesystem.read_only[0].src" (valid keys in [[filesystem.read_only]]: source, target)`),
		pol("unknown-nested.toml", "[sandbox.extra.deep]\nz = 1\n", `1: unknown key "sandbox.extra" (valid keys in [sandbox]: uid, gid, hostname, isolation)`),
		pol("the-key-dash.toml", "- = 1\n", `1: unknown key "-" (valid top-level keys: `),
		// Types.
		pol("version-string.toml", "version = \"1\"\n", `1: version: want an integer, found a string`),
		pol("uid-float.toml", "[sandbox]\nuid = 1.5\n", `2: sandbox.uid: want an integer, found a float`),
		pol("uid-string.toml", "[sandbox]\nuid = \"1000\"\n", `2: sandbox.uid: want an integer, found a string`),
		pol("sys-string.toml", "[filesystem]\nsys = \"yes\"\n", `2: filesystem.sys: want true or false, found a string`),
		pol("cpus-string.toml", "[resources]\ncpus = \"2\"\n", `2: resources.cpus: want a number, found a string`),
		pol("protected-string.toml", "[filesystem]\nprotected = \".git\"\n", `2: filesystem.protected: want an array of strings, found a string`),
		pol("protected-integer.toml", "[filesystem]\nprotected = [1]\n", `2: filesystem.protected[0]: want a string, found an integer`),
		pol("pids-array.toml", "[resources]\npids = [1]\n", `2: resources.pids: want an integer, found an array`),
		pol("local-port-string.toml", "[network]\nlocal_ports = [80, \"x\"]\n", `2: network.local_ports[1]: want an integer, found a string`),
		pol("allow-a-table.toml", "[network.allow]\nhost = \"a.example.com\"\nreason = \"r\"\n", `1: network.allow: want an array of tables, found a table: write [[network.allow]] for each entry`),
		pol("read-only-a-table.toml", "[filesystem.read_only]\nsource = \"/srv\"\n", `1: filesystem.read_only: want an array of tables, found a table: write [[filesystem.read_only]] for each entry`),
		pol("sandbox-array.toml", "[[sandbox]]\nuid = 5\n", `1: sandbox: want a table, found an array of tables`),
		pol("value-a-table.toml", "[resources.cpus]\nx = 1\n", `1: resources.cpus: want a number, found a table`),
		pol("allow-element-string.toml", "[network]\nallow = [\"a.example.com\"]\n", `2: network.allow[0]: want a table, found a string`),
		pol("set-integer.toml", "[environment.set]\nA = 1\n", `2: environment.set.A: want a string, found an integer`),
		pol("pass-string.toml", "[environment]\npass = \"PATH\"\n", `2: environment.pass: want an array of strings, found a string`),
		pol("profile-integer.toml", "[seccomp]\nprofile = 5\n", `2: seccomp.profile: want a string, found an integer`),
		// Sizes and durations.
		pol("size-unit.toml", "[resources]\nmemory = \"12XB\"\n", `2: resources.memory: bad size "12XB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`),
		pol("size-word.toml", "[filesystem]\ntmp_size = \"lots\"\n", `2: filesystem.tmp_size: bad size "lots": want a number with a unit`),
		pol("size-float.toml", "[filesystem]\nshm_size = 1.5\n", `2: filesystem.shm_size: want a size such as "512MiB" (or a whole number of bytes), found a float 1.5`),
		pol("size-overflow.toml", "[filesystem]\ntmp_size = \"99999999999TiB\"\n", `2: filesystem.tmp_size: bad size "99999999999TiB": too large`),
		pol("size-negative.toml", "[filesystem]\ntmp_size = -5\n", `2: filesystem.tmp_size: must be at least 1MiB, not -5B`),
		pol("duration-integer.toml", "[resources]\ntimeout = 600\n", `2: resources.timeout: want a duration string such as "30s", "10m" or "1h30m", found an integer 600`),
		pol("duration-word.toml", "[lifecycle]\nsession_max = \"forever\"\n", `2: lifecycle.session_max: bad duration "forever": want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)`),
		pol("duration-overflow.toml", "[resources]\ntimeout = \"9999999999h\"\n", `2: resources.timeout: bad duration "9999999999h": too large: durations go up to 2562047h (about 292 years)`),
		pol("timeout-zero.toml", "[resources]\ntimeout = \"0s\"\n", `2: resources.timeout: must be at least 1ms, e.g. 30s or 10m, not 0s`),
		pol("timeout-below-1ms.toml", "[resources]\ntimeout = \"500us\"\n", `2: resources.timeout: must be at least 1ms, e.g. 30s or 10m, not 500µs`),
		pol("timeout-negative.toml", "[resources]\ntimeout = \"-1m\"\n", `2: resources.timeout: must be at least 1ms, e.g. 30s or 10m, not -1m`),
		pol("session-max-zero.toml", "[lifecycle]\nsession_max = \"0s\"\n", `2: lifecycle.session_max: must be more than 0, not 0s`),
		pol("idle-over-max.toml", "[lifecycle]\nsession_idle = \"10h\"\n", `2: lifecycle.session_idle: 10h is longer than session_max (8h)`),
		// Ranges and values.
		pol("version-2.toml", "version = 2\n", `1: version: must be 1 (the only policy format so far), not 2`),
		pol("enforcement.toml", "enforcement = \"lenient\"\n", `1: enforcement: must be "best-effort" or "strict", not "lenient"`),
		pol("uid-0.toml", "[sandbox]\nuid = 0\n", `2: sandbox.uid: must be between 1 and 65533, not 0: the command must be unprivileged`),
		pol("uid-large.toml", "[sandbox]\nuid = 70000\n", `2: sandbox.uid: must be between 1 and 65533, not 70000`),
		pol("gid-negative.toml", "[sandbox]\ngid = -1\n", `2: sandbox.gid: must be between 1 and 65533, not -1`),
		pol("hostname.toml", "[sandbox]\nhostname = \"bad_host!\"\n", `2: sandbox.hostname: "bad_host!" is not a valid hostname: want at most 64 characters of dot-separated labels, each 1 to 63 letters, digits and hyphens, not starting or ending with a hyphen`),
		pol("tooling.toml", "[filesystem]\ntooling = \"docker\"\n", `2: filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "docker"`),
		pol("tooling-empty-rootfs.toml", "[filesystem]\ntooling = \"rootfs:\"\n", `2: filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "rootfs:"`),
		pol("workspace-tilde.toml", "[filesystem]\nworkspace = \"~/src\"\n", `2: filesystem.workspace: "~/src": "~" is not expanded: write the path out in full`),
		pol("protected-absolute.toml", "[filesystem]\nprotected = [\"/etc\"]\n", `2: filesystem.protected[0]: "/etc" must be relative to the workspace, such as ".git/hooks"`),
		pol("protected-dotdot.toml", "[filesystem]\nprotected = [\".git/hooks\", \"../x\"]\n", `2: filesystem.protected[1]: "../x" must stay inside the workspace: ".." is not allowed`),
		pol("protected-dot.toml", "[filesystem]\nprotected = [\".\"]\n", `2: filesystem.protected[0]: "." would protect the whole workspace: want a path inside it, such as ".git/hooks"`),
		pol("protected-unclean.toml", "[filesystem]\nprotected = [\"a//b\"]\n", `2: filesystem.protected[0]: "a//b" is not clean: write "a/b"`),
		pol("bind-over-root.toml", "[[filesystem.read_only]]\nsource = \"/srv\"\ntarget = \"/\"\n", `3: filesystem.read_only[0].target: cannot bind over /: the root is hutch's`),
		pol("bind-over-proc.toml", "[[filesystem.read_only]]\nsource = \"/srv\"\ntarget = \"/proc/x\"\n", `3: filesystem.read_only[0].target: cannot bind over /proc/x: /proc and everything beneath it are hutch's`),
		pol("bind-relative-target.toml", "[[filesystem.read_only]]\nsource = \"/srv\"\ntarget = \"data\"\n", `3: filesystem.read_only[0].target: must be an absolute path inside the sandbox (or empty for the source's path), not "data"`),
		pol("bind-source-tilde.toml", "[[filesystem.read_only]]\nsource = \"~/data\"\n", `2: filesystem.read_only[0].source: "~/data": "~" is not expanded: write the path out in full`),
		pol("tmp-small.toml", "[filesystem]\ntmp_size = \"1KiB\"\n", `2: filesystem.tmp_size: must be at least 1MiB, not 1KiB`),
		pol("cpus-0.toml", "[resources]\ncpus = 0\n", `2: resources.cpus: must be more than 0 and at most 1024, not 0`),
		pol("cpus-many.toml", "[resources]\ncpus = 5000\n", `2: resources.cpus: must be more than 0 and at most 1024, not 5000`),
		pol("memory-small.toml", "[resources]\nmemory = \"1MiB\"\n", `2: resources.memory: must be at least 16MiB, not 1MiB`),
		pol("pids-0.toml", "[resources]\npids = 0\n", `2: resources.pids: must be between 1 and 4194304, not 0`),
		pol("file-size-small.toml", "[resources]\nfile_size = \"1KiB\"\n", `2: resources.file_size: must be at least 1MiB, not 1KiB`),
		pol("open-files-few.toml", "[resources]\nopen_files = 2\n", `2: resources.open_files: must be between 16 and 1048576, not 2`),
		pol("mode.toml", "[network]\nmode = \"open\"\n", `2: network.mode: must be "proxy" or "none", not "open"`),
		pol("local-port-0.toml", "[network]\nlocal_ports = [0]\n", `2: network.local_ports[0]: must be between 1 and 65535, not 0`),
		pol("local-port-large.toml", "[network]\nlocal_ports = [70000]\n", `2: network.local_ports[0]: must be between 1 and 65535, not 70000`),
		pol("allow-no-host.toml", "[[network.allow]]\nreason = \"r\"\n", `1: network.allow[0].host: required: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`),
		pol("allow-no-reason.toml", "[[network.allow]]\nhost = \"a.example.com\"\n", `1: network.allow[0].reason: required: say why the sandbox needs a.example.com`),
		pol("allow-blank-reason.toml", "[[network.allow]]\nhost = \"a.example.com\"\nreason = \"  \"\n", `3: network.allow[0].reason: required: say why the sandbox needs a.example.com`),
		pol("allow-port-0.toml", "[[network.allow]]\nhost = \"a.example.com\"\nports = [0]\nreason = \"r\"\n", `3: network.allow[0].ports[0]: must be between 1 and 65535, not 0`),
		pol("allow-host-port.toml", "[[network.allow]]\nhost = \"a.example.com:443\"\nreason = \"r\"\n", `2: network.allow[0].host: "a.example.com:443": put the port in ports, not in host`),
		pol("allow-brackets.toml", "[[network.allow]]\nhost = \"[2001:db8::1]\"\nreason = \"r\"\n", `2: network.allow[0].host: "[2001:db8::1]": write IPv6 addresses without brackets`),
		pol("allow-range.toml", "[[network.allow]]\nhost = \"10.0.0.0/8\"\nreason = \"r\"\n", `2: network.allow[0].host: "10.0.0.0/8": address ranges are not supported`),
		pol("allow-bad-host.toml", "[[network.allow]]\nhost = \"exa mple.com\"\nreason = \"r\"\n", `2: network.allow[0].host: "exa mple.com" is not a valid host: want an exact name`),
		pol("allow-bad-address.toml", "[[network.allow]]\nhost = \"a.example.com\"\naddresses = [\"10.0.0.300\"]\nreason = \"r\"\n", `3: network.allow[0].addresses[0]: want an IPv4 or IPv6 address (no brackets, ports or zones), not "10.0.0.300"`),
		pol("pass-bad-name.toml", "[environment]\npass = [\"1BAD\"]\n", `2: environment.pass[0]: "1BAD" is not a variable name: want letters, digits and underscores, not starting with a digit, optionally ending in "*" to pass every variable with that prefix`),
		pol("set-home.toml", "[environment.set]\nHOME = \"/root\"\n", `2: environment.set.HOME: hutch sets HOME itself (to /home/sandbox), after environment.set; --env HOME=... overrides it for one run`),
		pol("set-bad-name.toml", "[environment.set]\n\"A.B\" = \"x\"\n", `2: environment.set."A.B": "A.B" is not a variable name: want letters, digits and underscores, not starting with a digit`),
		pol("profile-tilde.toml", "[seccomp]\nprofile = \"~/p.json\"\n", `2: seccomp.profile: "~/p.json": "~" is not expanded: write the path out in full`),
		pol("every-problem.toml", "[sandbox]\nuid = \"x\"\nbogus = 1\n[resources]\nmemory = \"12XB\"\n",
			"2: sandbox.uid: want an integer, found a string\n"+filepath.Join(dir, "every-problem.toml")+`:3: unknown key "sandbox.bogus" (valid keys in [sandbox]: uid, gid, hostname, isolation)`+"\n"+
				filepath.Join(dir, "every-problem.toml")+`:5: resources.memory: bad size "12XB"`),
		{"run --policy (exit 125)", run("--policy", file("run-uid-0.toml", "[sandbox]\nuid = 0\n"), "--", "true"), 125, `run-uid-0.toml:2: sandbox.uid: must be between 1 and 65533, not 0`},
		{"session start --policy (exit 125)", []string{"session", "start", "--policy", file("start-mode.toml", "[network]\nmode = \"x\"\n")}, 125, `start-mode.toml:2: network.mode: must be "proxy" or "none", not "x"`},

		// Seccomp profiles.
		prof("syntax.json", `{"defaultAction": "SCMP_ACT_ALLOW",,}`, `invalid JSON at byte 35 (line 1, column 36): invalid character ',' looking for beginning of object key string`),
		prof("trailing.json", `{"defaultAction": "SCMP_ACT_ALLOW"} x`, `invalid JSON at byte 36 (line 1, column 37): unexpected data after the top-level value`),
		prof("empty.json", ``, `invalid JSON at byte 0 (line 1, column 1): unexpected end of input`),
		prof("array.json", `[]`, `$: expected an object, got array`),
		prof("no-default.json", `{}`, `$.defaultAction: missing (valid: SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, `),
		prof("bad-default.json", `{"defaultAction": "SCMP_ACT_FOO"}`, `$.defaultAction: unknown action "SCMP_ACT_FOO" (valid: SCMP_ACT_ALLOW, `),
		prof("unknown-field.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscall": []}`, `$.syscall: unknown field "syscall" (valid: defaultAction, defaultErrnoRet, architectures, archMap, flags, listenerPath, listenerMetadata, syscalls)`),
		prof("bad-action.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOPE"}]}`, `$.syscalls[0].action: unknown action "SCMP_ACT_NOPE" (valid: `),
		prof("no-names.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}`, `$.syscalls[0]: no syscall names`),
		prof("names-string.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": "read", "action": "SCMP_ACT_ALLOW"}]}`, `$.syscalls[0].names: expected an array, got string`),
		prof("bad-op.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_FOO"}]}]}`, `$.syscalls[0].args[0].op: unknown operator "SCMP_CMP_FOO" (valid: SCMP_CMP_NE, `),
		prof("bad-index.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`, `$.syscalls[0].args[0].index: 6 is out of range (0 to 5)`),
		prof("errno-large.json", `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 5000}`, `$.defaultErrnoRet: 5000 is out of range (0 to 4095)`),
		prof("errno-negative.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": -1}]}`, `$.syscalls[0].errnoRet: expected an unsigned integer (0 to 4095), got -1`),
		prof("bad-arch.json", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_Z80"]}`, `$.architectures[0]: unknown architecture "SCMP_ARCH_Z80" (valid: SCMP_ARCH_X86, `),
		prof("both-arches.json", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}`, `$: both "architectures" and "archMap" are set; use one of them`),
		prof("bad-min-kernel.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "six"}}]}`, `$.syscalls[0].includes.minKernel: invalid kernel version "six" (valid: MAJOR.MINOR, e.g. "5.8")`),
		prof("exit-group-only.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["exit_group"], "action": "SCMP_ACT_ALLOW"}]}`, `the profile does not allow what hutch's exec stage calls after loading the filter (nsjail/execstage.c); allow these: prctl (become the command's subreaper, so that nothing it leaves behind escapes the end of the command), fcntl (make the status pipe close-on-exec), chdir (change to the command's working directory), close (close hutch's descriptors before the command runs), `),
		prof("kills-fallbacks.json", `{"defaultAction": "SCMP_ACT_KILL_PROCESS", "syscalls": [{"names": ["`+strings.Join(stageRequired, `", "`)+`"], "action": "SCMP_ACT_ALLOW"}]}`, `the profile does not allow what hutch's exec stage calls after loading the filter (nsjail/execstage.c); it kills the process on: close_range (close hutch's descriptors before the command runs; close is the fallback), `),
		{"run --seccomp-profile missing", run("--seccomp-profile", "/nonexistent.json", "--", "true"), 125, `hutch: cannot set up the sandbox: seccomp profile /nonexistent.json: no such file or directory`},
		{"run --seccomp-profile /dev/zero", run("--seccomp-profile", "/dev/zero", "--", "true"), 125, `hutch: seccomp profile /dev/zero is a character device, not a regular file: pass a file of at most 4MiB`},
		{"run --seccomp-profile a directory", run("--seccomp-profile", dir, "--", "true"), 125, `hutch: seccomp profile ` + dir + ` is a directory, not a regular file: pass a file of at most 4MiB`},
		{"seccomp show --seccomp-profile /dev/zero", []string{"seccomp", "show", "--seccomp-profile", "/dev/zero"}, 1, `hutch: seccomp profile /dev/zero is a character device, not a regular file: pass a file of at most 4MiB`},
		{"seccomp show of a profile hutch refuses", []string{"seccomp", "show", "--seccomp-profile", filepath.Join(dir, "exit-group-only.json")}, 1, `hutch: seccomp profile ` + filepath.Join(dir, "exit-group-only.json") + ` is refused: the profile does not allow what hutch's exec stage calls`},
		{"seccomp show, strict, an unknown name", []string{"seccomp", "show", "--policy", file("strict.toml", "enforcement = \"strict\"\n[seccomp]\nprofile = \"unknown-name.json\"\n")}, 1,
			`unknown-name.json is refused: $.syscalls[0].names[18]: unknown syscall "hutch_no_such_call": strict enforcement refuses what it cannot apply: remove the name, or set enforcement = "best-effort"`},
	}
	file("unknown-name.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["`+strings.Join(stageRequired, `", "`)+`", "hutch_no_such_call"], "action": "SCMP_ACT_ALLOW"}]}`)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := listDir(t, ws)
			r := hutch(t, opts{dir: ws}, tc.args...)
			if r.code == 0 && len(tc.args) > 1 && tc.args[0] == "session" && tc.args[1] == "start" {
				hutch(t, opts{dir: ws}, "session", "stop", strings.TrimSpace(r.stdout)) // started after all
			}
			// seccomp show prints the rules, then says why hutch refuses them.
			quiet := r.stdout == "" || tc.args[0] == "seccomp"
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || !quiet {
				t.Errorf("hutch %q: exit %d, stdout %q, stderr:\n%s\nwant exit %d, no stdout, stderr with:\n%s", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
			}
			if after := listDir(t, ws); !slices.Equal(before, after) {
				t.Errorf("hutch %q left the workspace changed: %q, was %q", tc.args, after, before)
			}
		})
	}
}

// listDir lists dir's entries, recursively.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && path != dir {
			names = append(names, strings.TrimPrefix(path, dir+"/"))
		}
		return nil
	})
	return names
}

// A session's server refuses a bad exec request itself, whatever client
// sent it: a negative timeout is not quietly replaced by the policy's.
func TestSessionRefusesBadExecRequest(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws, "--no-discover")
	sock := filepath.Join(stateDir, "hutch", name+".sock")
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial the session socket: %v", err)
	}
	defer c.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fd := int(devnull.Fd())
	// An exec request is {"op":"exec"} with stdio and its body in a file
	// (session/session.go).
	sendExec := func(c *net.UnixConn, body string) {
		t.Helper()
		f, err := os.CreateTemp(t.TempDir(), "req")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString(body)
		if _, _, err := c.WriteMsgUnix([]byte(`{"op":"exec"}`), syscall.UnixRights(fd, fd, fd, int(f.Fd())), nil); err != nil {
			t.Fatal(err)
		}
	}
	sendExec(c, `{"op":"exec","argv":["/bin/sh","-c","sleep 1"],"timeout_ms":-5}`)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1<<16)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read the reply: %v", err)
	}
	want := `{"op":"error","exit_code":0,"error":"exec request: timeout_ms -5: want a whole number of milliseconds, at least 1, or 0 for the policy's timeout"}`
	if got := string(buf[:n]); got != want {
		t.Errorf("reply %s\nwant %s", got, want)
	}

	// A cwd outside the workspace is refused by the session itself (the
	// Go API, hutch.Session.Exec), with the message of the CLI and MCP.
	c2, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial the session socket: %v", err)
	}
	defer c2.Close()
	sendExec(c2, `{"op":"exec","argv":["/bin/sh","-c","pwd"],"cwd":"/etc"}`)
	c2.SetReadDeadline(time.Now().Add(20 * time.Second))
	var replies []string
	for len(replies) < 2 {
		n, err := c2.Read(buf)
		if err != nil {
			t.Fatalf("read the reply: %v (so far %q)", err, replies)
		}
		replies = append(replies, string(buf[:n]))
	}
	if !strings.Contains(replies[1], `"op":"exit","exit_code":125,"messages":["hutch: cwd \"/etc\" resolves to /etc, outside /workspace`) {
		t.Errorf("replies %q; want exit 125 refusing the cwd", replies)
	}
}

// Malformed run_command arguments, sent to `hutch mcp` over its stdio as a
// client sends them: each is a tool error (isError) whose text (starting
// with want) names the argument and what would be valid; the server keeps
// serving.
func TestMalformedMCPArguments(t *testing.T) {
	ws := userDir(t)
	// hutch mcp has the workspace at its host path.
	cwdMsg := `outside ` + ws + `: commands run in the workspace; pass a directory relative to ` + ws + ` (e.g. "src") or an absolute path below it`
	cases := []struct{ args, want string }{
		{`{}`, `invalid input: command is empty: pass a shell command line, e.g. "ls -la"`},
		{`{"command":""}`, `invalid input: command is empty: pass a shell command line`},
		{`{"command":"  "}`, `invalid input: command is empty: pass a shell command line`},
		{`{"command":"a\u0000b"}`, `invalid input: command contains a NUL byte`},
		{`{"command":1}`, `invalid input: argument "command": want a string, got JSON number`},
		{`{"command":["ls"]}`, `invalid input: argument "command": want a string, got JSON array`},
		{`{"command":null}`, `invalid input: command is empty`},
		{`{"command":"ls","cwd":"../etc"}`, `invalid input: cwd "../etc" resolves to ` + filepath.Join(filepath.Dir(ws), "etc") + `, ` + cwdMsg},
		{`{"command":"ls","cwd":"/etc"}`, `invalid input: cwd "/etc" resolves to /etc, ` + cwdMsg},
		{`{"command":"ls","cwd":"/workspace/src"}`, `invalid input: cwd "/workspace/src" resolves to /workspace/src, ` + cwdMsg},
		{`{"command":"ls","cwd":"a\u0000"}`, `invalid input: cwd contains a NUL byte`},
		{`{"command":"ls","cwd":5}`, `invalid input: argument "cwd": want a string, got JSON number`},
		{`{"command":"ls","timeout_seconds":-1}`, `invalid input: timeout_seconds -1: must be positive (or 0 for the policy's timeout)`},
		{`{"command":"ls","timeout_seconds":100000}`, `invalid input: timeout_seconds 100000 exceeds the policy's limit of 600 seconds (resources.timeout 10m); pass at most 600, or 0 for the limit itself`},
		{`{"command":"ls","timeout_seconds":"5"}`, `invalid input: argument "timeout_seconds": want an integer, got JSON string`},
		{`{"command":"ls","timeout_seconds":1.5}`, `invalid input: argument "timeout_seconds": want an integer, got JSON number 1.5`},
		{`{"command":"ls","fresh":"yes"}`, `invalid input: argument "fresh": want a boolean, got JSON string`},
		{`{"command":"ls","cmd":"x"}`, `invalid input: unknown argument "cmd": run_command takes command, cwd, timeout_seconds, fresh and background`},
		{`[]`, `invalid input: arguments: want an object with "command", got JSON array`},
		{`null`, `invalid input: arguments missing: pass an object with "command" (a shell command line)`},
		{`"ls"`, `invalid input: arguments: want an object with "command", got JSON string`},
	}
	cmd := hutchCmd(opts{dir: ws}, "mcp", "--workspace", ws, "--no-discover")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 8<<20)
	send := func(msg string) {
		if _, err := io.WriteString(in, msg+"\n"); err != nil {
			t.Fatalf("write to hutch mcp: %v\n%s", err, stderr.String())
		}
	}
	type response struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct{ Text string } `json:"content"`
			IsError bool                    `json:"isError"`
		} `json:"result"`
		Error *struct{ Message string } `json:"error"`
	}
	read := func() response {
		done := make(chan bool, 1)
		go func() { done <- lines.Scan() }()
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("hutch mcp ended: %v\n%s", lines.Err(), stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("no answer from hutch mcp within 60s\n%s", stderr.String())
		}
		var r response
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return r
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}`)
	if r := read(); r.Error != nil {
		t.Fatalf("initialize: %s", r.Error.Message)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, tc := range cases {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_command","arguments":%s}}`, i+1, tc.args))
		r := read()
		if r.ID != i+1 || !r.Result.IsError || len(r.Result.Content) != 1 || !strings.HasPrefix(r.Result.Content[0].Text, tc.want) {
			t.Errorf("arguments %s: answer %+v\nwant a tool error: %s", tc.args, r, tc.want)
		}
	}
	send(`{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	if r := read(); r.Error == nil || r.Error.Message != `unknown tool "nope"` {
		t.Errorf("unknown tool: %+v", r)
	}
	// Still serving.
	send(`{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"echo ok"}}}`)
	if r := read(); r.Result.IsError || len(r.Result.Content) == 0 || !strings.Contains(r.Result.Content[0].Text, "ok") {
		t.Errorf("a good call after the bad ones: %+v", r)
	}
}
