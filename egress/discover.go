package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/hutchsandbox/hutch/policy"
)

// Discovered is an allow entry for a package registry the host's own
// tools are configured to use.
type Discovered struct {
	// Entry has the registry's host, its ports and a generated reason
	// naming the tool and where its configuration came from.
	Entry policy.AllowEntry
	// Source says where the entry came from: files ("~/.npmrc"),
	// variables ("$PIP_INDEX_URL") or tool queries ("go env"), joined by
	// ", " when several agree.
	Source string
}

// HostConfig is what Discover reads: the host's environment, files and
// tools. Every field may be replaced for tests; nil functions read or run
// nothing.
type HostConfig struct {
	// Env is the host's environment, as "NAME=value" strings.
	Env []string
	// Home is the invoking user's home directory ("" when unknown).
	Home string
	// ReadFile reads a configuration file.
	ReadFile func(path string) ([]byte, error)
	// ReadDir lists the file names in a directory.
	ReadDir func(dir string) ([]string, error)
	// LookPath finds a tool on PATH; nil runs no tool.
	LookPath func(name string) (string, error)
	// Run runs a tool (the path LookPath found) and returns its standard
	// output; nil runs no tool.
	Run func(ctx context.Context, path string, args ...string) ([]byte, error)
	// ToolTimeout bounds each tool run; 0 is 5s.
	ToolTimeout time.Duration
}

// maxConfigFile caps what Discover reads of one file.
const maxConfigFile = 1 << 20

// maxDirEntries caps the files Discover reads from one directory.
const maxDirEntries = 256

// SystemHost returns the HostConfig of this process: its environment,
// HOME, the filesystem and the tools on PATH. Files, directories and tools
// inside any of the untrusted directories (pass the workspace, which the
// sandbox can write) are neither read nor run, and no tool runs at all
// when the home directory is inside one of them: discovery must not take
// its answers from what a sandboxed command could have written.
func SystemHost(untrusted ...string) HostConfig {
	home, _ := os.UserHomeDir()
	var bad []string
	for _, u := range untrusted {
		if u == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(u); err == nil {
			u = r
		}
		bad = append(bad, filepath.Clean(u))
	}
	inside := func(p string) bool {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		p = filepath.Clean(p)
		for _, u := range bad {
			if p == u || strings.HasPrefix(p, u+string(filepath.Separator)) || u == "/" {
				return true
			}
		}
		return false
	}
	h := HostConfig{
		Env:  os.Environ(),
		Home: home,
		ReadFile: func(path string) ([]byte, error) {
			if inside(path) {
				return nil, fmt.Errorf("%s is inside an untrusted directory", path)
			}
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return io.ReadAll(io.LimitReader(f, maxConfigFile))
		},
		ReadDir: func(dir string) ([]string, error) {
			if inside(dir) {
				return nil, fmt.Errorf("%s is inside an untrusted directory", dir)
			}
			ents, err := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return names, err
		},
	}
	if home != "" && inside(home) {
		return h
	}
	h.LookPath = func(name string) (string, error) {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(p) || inside(p) {
			return "", fmt.Errorf("%s: %s is not a trusted location", name, p)
		}
		return p, nil
	}
	h.Run = func(ctx context.Context, path string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		// Outside any project, so that no project configuration (and no
		// go.mod toolchain line) is read, and without touching the network.
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "npm_config_update_notifier=false", "NO_UPDATE_NOTIFIER=1")
		cmd.Stdin = nil
		cmd.Stderr = nil
		cmd.WaitDelay = time.Second
		var out bytes.Buffer
		cmd.Stdout = &limitedBuffer{buf: &out, max: 64 << 10}
		err := cmd.Run()
		return out.Bytes(), err
	}
	return h
}

type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// discovery accumulates the entries Discover finds.
type discovery struct {
	h     HostConfig
	env   map[string]string
	found []*found
	index map[string]*found // by normalized host
}

// found is one discovered host: its ports, and for each kind of registry
// ("npm registry") the places that configure it.
type found struct {
	host    string
	ports   []int
	whats   []string
	wheres  map[string][]string
	sources []string
}

// Discover finds the package registries the host's own tools are
// configured to use, and returns one allow entry per host (ports merged),
// each with a generated reason, in a fixed order: npm, Go, pip, Cargo,
// apt. It knows no registry by name: a tool that nothing configures (and
// that cannot be asked) contributes nothing. Hosts named "localhost" and
// internal IP addresses are left out (a discovered entry must not open
// the host's loopback or local network); http and https URLs only.
//
// Where it looks:
//   - npm: $npm_config_registry; registry= and @scope:registry= in the
//     user config ($npm_config_userconfig or ~/.npmrc) and the global
//     config ($npm_config_globalconfig, or $npm_config_prefix/etc/npmrc
//     or node's PREFIX/etc/npmrc, and /etc/npmrc); and
//     `npm config get registry` when npm is on PATH.
//   - Go: `go env GOPROXY GOSUMDB` when go is on PATH, otherwise
//     $GOPROXY and $GOSUMDB, then the go env file ($GOENV or
//     ~/.config/go/env).
//   - pip: $PIP_INDEX_URL, $PIP_EXTRA_INDEX_URL; index-url and
//     extra-index-url in $PIP_CONFIG_FILE, /etc/pip.conf,
//     $XDG_CONFIG_DIRS/pip/pip.conf, ~/.config/pip/pip.conf,
//     ~/.pip/pip.conf.
//   - Cargo: $CARGO_REGISTRIES_<NAME>_INDEX; registries.*.index,
//     source.*.registry and registry.index in $CARGO_HOME/config
//     or, when that is absent, $CARGO_HOME/config.toml (~/.cargo).
//   - apt: deb and deb-src lines of /etc/apt/sources.list and
//     /etc/apt/sources.list.d/*.list, URIs of enabled stanzas of
//     /etc/apt/sources.list.d/*.sources.
func Discover(ctx context.Context, h HostConfig) []Discovered {
	d := &discovery{h: h, env: map[string]string{}, index: map[string]*found{}}
	for _, kv := range h.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			d.env[k] = v
		}
	}
	if d.h.ToolTimeout <= 0 {
		d.h.ToolTimeout = 5 * time.Second
	}
	// Ask the tools concurrently: npm in particular takes a while to start.
	var npmOut, goOut []byte
	var npmOK, goOK bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); npmOut, npmOK = d.runTool(ctx, "npm", "config", "get", "registry") }()
	go func() { defer wg.Done(); goOut, goOK = d.runTool(ctx, "go", "env", "GOPROXY", "GOSUMDB") }()
	wg.Wait()

	d.npm(npmOut, npmOK)
	d.golang(goOut, goOK)
	d.pip()
	d.cargo()
	d.apt()

	out := make([]Discovered, 0, len(d.found))
	for _, f := range d.found {
		var reasons []string
		for _, w := range f.whats {
			reasons = append(reasons, fmt.Sprintf("%s configured on this host (%s)", w, strings.Join(f.wheres[w], ", ")))
		}
		out = append(out, Discovered{
			Entry:  policy.AllowEntry{Host: f.host, Ports: f.ports, Reason: strings.Join(reasons, "; ")},
			Source: strings.Join(f.sources, ", "),
		})
	}
	return out
}

func (d *discovery) runTool(ctx context.Context, name string, args ...string) ([]byte, bool) {
	if d.h.LookPath == nil || d.h.Run == nil {
		return nil, false
	}
	path, err := d.h.LookPath(name)
	if err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, d.h.ToolTimeout)
	defer cancel()
	out, err := d.h.Run(ctx, path, args...)
	if err != nil {
		return nil, false
	}
	return out, true
}

func (d *discovery) getenv(k string) string { return d.env[k] }

// getenvFold looks a variable up case-insensitively (npm's way).
func (d *discovery) getenvFold(k string) string {
	if v, ok := d.env[k]; ok {
		return v
	}
	for _, ek := range slices.Sorted(maps.Keys(d.env)) {
		if strings.EqualFold(ek, k) {
			return d.env[ek]
		}
	}
	return ""
}

func (d *discovery) readFile(path string) ([]byte, bool) {
	if d.h.ReadFile == nil || path == "" {
		return nil, false
	}
	b, err := d.h.ReadFile(path)
	if err != nil {
		return nil, false
	}
	if len(b) > maxConfigFile {
		b = b[:maxConfigFile]
	}
	return b, true
}

// display writes a path under the home directory as "~/...".
func (d *discovery) display(path string) string {
	if d.h.Home != "" {
		if rest, ok := strings.CutPrefix(path, strings.TrimSuffix(d.h.Home, "/")+"/"); ok {
			return "~/" + rest
		}
	}
	return path
}

func (d *discovery) home(rel string) string {
	if d.h.Home == "" {
		return ""
	}
	return filepath.Join(d.h.Home, rel)
}

// addURL adds the registry at rawURL: what names it ("npm registry"),
// where says where it was configured ("~/.npmrc").
func (d *discovery) addURL(rawURL, what, where string) {
	host, port, ok := registryHostPort(rawURL)
	if !ok {
		return
	}
	f := d.index[host]
	if f == nil {
		f = &found{host: host, wheres: map[string][]string{}}
		d.index[host] = f
		d.found = append(d.found, f)
	}
	if !slices.Contains(f.ports, port) {
		f.ports = append(f.ports, port)
		slices.Sort(f.ports)
	}
	if _, ok := f.wheres[what]; !ok {
		f.whats = append(f.whats, what)
	}
	if !slices.Contains(f.wheres[what], where) {
		f.wheres[what] = append(f.wheres[what], where)
	}
	if !slices.Contains(f.sources, where) {
		f.sources = append(f.sources, where)
	}
}

// registryHostPort extracts the host and port a registry URL connects to.
// It accepts http and https URLs, optionally prefixed "sparse+",
// "registry+" (Cargo) or "mirror+" (apt), and refuses localhost and
// internal IP addresses.
func registryHostPort(raw string) (string, int, bool) {
	raw = strings.TrimSpace(raw)
	for _, p := range []string{"sparse+", "registry+", "mirror+"} {
		raw = strings.TrimPrefix(raw, p)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", 0, false
	}
	port := 0
	switch strings.ToLower(u.Scheme) {
	case "https":
		port = 443
	case "http":
		port = 80
	default:
		return "", 0, false
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, false
		}
		port = n
	}
	dst, ok := parseDest(u.Hostname())
	if !ok {
		return "", 0, false
	}
	if dst.isAddr {
		if IsInternal(dst.addr) {
			return "", 0, false
		}
		return dst.addr.String(), port, true
	}
	if dst.name == "localhost" || strings.HasSuffix(dst.name, ".localhost") {
		return "", 0, false
	}
	return dst.name, port, true
}

// --- npm ---

func (d *discovery) npm(toolOut []byte, toolOK bool) {
	if v := d.getenvFold("npm_config_registry"); v != "" {
		d.addURL(v, "npm registry", "$npm_config_registry")
	}
	user := d.getenvFold("npm_config_userconfig")
	if user == "" {
		user = d.home(".npmrc")
	}
	files := []string{user}
	if g := d.getenvFold("npm_config_globalconfig"); g != "" {
		files = append(files, g)
	} else {
		if prefix := d.getenvFold("npm_config_prefix"); prefix != "" {
			files = append(files, filepath.Join(prefix, "etc", "npmrc"))
		} else if d.h.LookPath != nil {
			if node, err := d.h.LookPath("node"); err == nil {
				// npm's default prefix is node's installation directory.
				files = append(files, filepath.Join(filepath.Dir(filepath.Dir(node)), "etc", "npmrc"))
			}
		}
		files = append(files, "/etc/npmrc")
	}
	seen := map[string]bool{}
	for _, f := range files {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		b, ok := d.readFile(f)
		if !ok {
			continue
		}
		for _, kv := range parseINI(b) {
			key := strings.ToLower(kv.key)
			what := ""
			switch {
			case key == "registry":
				what = "npm registry"
			case strings.HasPrefix(key, "@") && strings.HasSuffix(key, ":registry"):
				what = "npm registry for " + strings.TrimSuffix(kv.key, ":registry")
			default:
				continue
			}
			v, ok := d.expand(unquote(kv.value))
			if !ok {
				continue
			}
			d.addURL(v, what, d.display(f))
		}
	}
	if toolOK {
		d.addURL(firstLine(toolOut), "npm registry", "npm config get registry")
	}
}

// expand replaces ${NAME} with the host's variables, as npm does; ok is
// false when a variable is unset.
func (d *discovery) expand(s string) (string, bool) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), true
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", false
		}
		v, ok := d.env[s[i+2:i+j]]
		if !ok {
			return "", false
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+j+1:]
	}
}

// --- Go ---

func (d *discovery) golang(toolOut []byte, toolOK bool) {
	var goproxy, gosumdb, where string
	if toolOK {
		lines := strings.Split(strings.TrimRight(string(toolOut), "\n"), "\n")
		if len(lines) >= 1 {
			goproxy = strings.TrimSpace(lines[0])
		}
		if len(lines) >= 2 {
			gosumdb = strings.TrimSpace(lines[1])
		}
		where = "go env"
	} else {
		goproxy, gosumdb = d.getenv("GOPROXY"), d.getenv("GOSUMDB")
		where = "environment"
		file := d.getenv("GOENV")
		if file == "" {
			if x := d.getenv("XDG_CONFIG_HOME"); x != "" {
				file = filepath.Join(x, "go", "env")
			} else {
				file = d.home(".config/go/env")
			}
		}
		if file != "off" && (goproxy == "" || gosumdb == "") {
			if b, ok := d.readFile(file); ok {
				for _, line := range strings.Split(string(b), "\n") {
					k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
					if !ok {
						continue
					}
					switch {
					case k == "GOPROXY" && goproxy == "":
						goproxy = v
					case k == "GOSUMDB" && gosumdb == "":
						gosumdb = v
					}
				}
				where = d.display(file)
			}
		}
	}
	for _, p := range strings.FieldsFunc(goproxy, func(r rune) bool { return r == ',' || r == '|' }) {
		p = strings.TrimSpace(p)
		if p == "" || p == "direct" || p == "off" {
			continue
		}
		if !strings.Contains(p, "://") {
			p = "https://" + p // go's own rule for a proxy without a scheme
		}
		d.addURL(p, "Go module proxy", "GOPROXY from "+where)
	}
	if f := strings.Fields(gosumdb); len(f) > 0 && f[0] != "off" {
		u := ""
		if len(f) > 1 {
			u = f[1]
		} else {
			name, _, _ := strings.Cut(f[0], "+")
			u = name
		}
		if !strings.Contains(u, "://") {
			u = "https://" + u
		}
		d.addURL(u, "Go checksum database", "GOSUMDB from "+where)
	}
}

// --- pip ---

func (d *discovery) pip() {
	if v := d.getenv("PIP_INDEX_URL"); v != "" {
		d.addURL(v, "pip package index", "$PIP_INDEX_URL")
	}
	for _, v := range strings.Fields(d.getenv("PIP_EXTRA_INDEX_URL")) {
		d.addURL(v, "pip extra package index", "$PIP_EXTRA_INDEX_URL")
	}
	files := []string{d.getenv("PIP_CONFIG_FILE"), "/etc/pip.conf"}
	xdgDirs := d.getenv("XDG_CONFIG_DIRS")
	if xdgDirs == "" {
		xdgDirs = "/etc/xdg"
	}
	for _, dir := range strings.Split(xdgDirs, ":") {
		if filepath.IsAbs(dir) {
			files = append(files, filepath.Join(dir, "pip", "pip.conf"))
		}
	}
	if x := d.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		files = append(files, filepath.Join(x, "pip", "pip.conf"))
	} else {
		files = append(files, d.home(".config/pip/pip.conf"))
	}
	files = append(files, d.home(".pip/pip.conf"))
	seen := map[string]bool{}
	for _, f := range files {
		if f == "" || f == os.DevNull || seen[f] {
			continue
		}
		seen[f] = true
		b, ok := d.readFile(f)
		if !ok {
			continue
		}
		for _, kv := range parseINI(b) {
			key := strings.ReplaceAll(strings.ToLower(kv.key), "_", "-")
			var what string
			switch key {
			case "index-url":
				what = "pip package index"
			case "extra-index-url":
				what = "pip extra package index"
			default:
				continue
			}
			for _, v := range strings.Fields(kv.value) {
				d.addURL(v, what, key+" in "+d.display(f))
			}
		}
	}
}

// --- Cargo ---

func (d *discovery) cargo() {
	var names []string
	for k := range d.env {
		if strings.HasPrefix(k, "CARGO_REGISTRIES_") && strings.HasSuffix(k, "_INDEX") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		d.addURL(d.env[k], "Cargo registry", "$"+k)
	}
	home := d.getenv("CARGO_HOME")
	if home == "" {
		home = d.home(".cargo")
	}
	if home == "" {
		return
	}
	// Cargo reads config when it exists (and warns), else config.toml.
	for _, name := range []string{"config", "config.toml"} {
		f := filepath.Join(home, name)
		b, ok := d.readFile(f)
		if !ok {
			continue
		}
		var cfg struct {
			Registries map[string]struct {
				Index string `toml:"index"`
			} `toml:"registries"`
			Source map[string]struct {
				Registry string `toml:"registry"`
			} `toml:"source"`
			Registry struct {
				Index string `toml:"index"`
			} `toml:"registry"`
		}
		if err := toml.Unmarshal(b, &cfg); err != nil {
			return
		}
		where := d.display(f)
		for _, n := range slices.Sorted(maps.Keys(cfg.Registries)) {
			d.addURL(cfg.Registries[n].Index, "Cargo registry", "registries."+n+".index in "+where)
		}
		for _, n := range slices.Sorted(maps.Keys(cfg.Source)) {
			d.addURL(cfg.Source[n].Registry, "Cargo registry mirror", "source."+n+".registry in "+where)
		}
		d.addURL(cfg.Registry.Index, "Cargo registry", "registry.index in "+where)
		return
	}
}

// --- apt ---

func (d *discovery) apt() {
	const dir = "/etc/apt/sources.list.d"
	d.aptList("/etc/apt/sources.list")
	if d.h.ReadDir == nil {
		return
	}
	names, err := d.h.ReadDir(dir)
	if err != nil && len(names) == 0 {
		return
	}
	slices.Sort(names)
	if len(names) > maxDirEntries {
		names = names[:maxDirEntries]
	}
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".list"):
			d.aptList(filepath.Join(dir, n))
		case strings.HasSuffix(n, ".sources"):
			d.aptSources(filepath.Join(dir, n))
		}
	}
}

// aptList reads one-line-style sources: "deb [options] URI suite ...".
func (d *discovery) aptList(f string) {
	b, ok := d.readFile(f)
	if !ok {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "deb" && fields[0] != "deb-src" {
			continue
		}
		rest := fields[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options: up to the field that ends with "]".
			for len(rest) > 0 && !strings.HasSuffix(rest[0], "]") {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				continue
			}
			rest = rest[1:]
		}
		if len(rest) > 0 {
			d.addURL(rest[0], "apt repository", f)
		}
	}
}

// aptSources reads deb822-style sources: stanzas with URIs: (and
// Enabled: no to skip one).
func (d *discovery) aptSources(f string) {
	b, ok := d.readFile(f)
	if !ok {
		return
	}
	for _, stanza := range parseDeb822(b) {
		if strings.EqualFold(strings.TrimSpace(stanza["enabled"]), "no") {
			continue
		}
		for _, u := range strings.Fields(stanza["uris"]) {
			d.addURL(u, "apt repository", f)
		}
	}
}

// parseDeb822 parses stanzas of "Field: value" lines (continuations
// indented), separated by blank lines; field names are lowercased.
func parseDeb822(b []byte) []map[string]string {
	var out []map[string]string
	cur := map[string]string{}
	last := ""
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur, last = map[string]string{}, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxConfigFile)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			cur[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// --- shared parsing ---

type iniValue struct{ key, value string }

// parseINI reads "key = value" and "key: value" lines of an INI-style
// file (npmrc, pip.conf), with "#" and ";" comments, [section] headers
// ignored, and indented continuation lines appended to the previous value
// (pip's multi-line extra-index-url).
func parseINI(b []byte) []iniValue {
	var out []iniValue
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' || t[0] == ';' || t[0] == '[' {
			continue
		}
		if (line[0] == ' ' || line[0] == '\t') && len(out) > 0 {
			out[len(out)-1].value += " " + t
			continue
		}
		i := strings.IndexAny(t, "=:")
		// "@scope:registry=..." holds a colon in the key: prefer "=".
		if j := strings.IndexByte(t, '='); j >= 0 {
			i = j
		}
		if i <= 0 {
			continue
		}
		out = append(out, iniValue{key: strings.TrimSpace(t[:i]), value: strings.TrimSpace(t[i+1:])})
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s)
}
