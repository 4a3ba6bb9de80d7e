package seccompprofiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/internal/kernel"

	seccomp "github.com/seccomp/libseccomp-golang"
)

// cacheFormat changes whenever the cached Filter's meaning or layout does.
const cacheFormat = "hutch-seccomp-cache-v2"

// Cache keeps compiled filters on disk, one file per key under Dir.
// Building the default filter costs milliseconds; loading a cached one
// costs a file read.
type Cache struct {
	// Dir holds the entries; "" disables caching (Compile always compiles).
	Dir string
	// Logger receives the debug records of hits and misses; nil means
	// slog.Default().
	Logger *slog.Logger
}

// DefaultCacheDir is the seccomp/ subdirectory of hutch's cache
// (hostdirs.Cache), or "" (no caching) when there is none.
func DefaultCacheDir() string {
	if d := hostdirs.Cache(); d != "" {
		return filepath.Join(d, "seccomp")
	}
	return ""
}

// cacheEntry is the on-disk form of a filter: compact, since reading it is
// what a cache hit costs. Denials are stored once, in evaluation order, with
// their reasons deduplicated; Filter.Denials is rebuilt from them.
type cacheEntry struct {
	Format            string         `json:"format"`
	Key               string         `json:"key"`
	BPFSum            string         `json:"bpfSum"`
	BPF               []byte         `json:"bpf"`
	Notify            bool           `json:"notify"`
	NotifyUnavailable string         `json:"notifyUnavailable,omitempty"`
	ProfileHash       string         `json:"profileHash"`
	Arch              string         `json:"arch"`
	DefaultAction     string         `json:"defaultAction"`
	DefaultErrno      int            `json:"defaultErrno"`
	Warnings          []string       `json:"warnings,omitempty"`
	Unknown           []string       `json:"unknown,omitempty"`
	Reasons           []string       `json:"reasons"`
	Denials           []cachedDenial `json:"denials"`
}

type cachedDenial struct {
	Nr      uint32 `json:"n"`
	Name    string `json:"s"`
	Errno   int    `json:"e"`
	Reason  int    `json:"r"`
	Args    []Arg  `json:"a,omitempty"`
	Quiet   bool   `json:"q,omitempty"`
	Default bool   `json:"d,omitempty"`
}

func newCacheEntry(key string, f *Filter) *cacheEntry {
	sum := sha256.Sum256(f.BPF)
	e := &cacheEntry{
		Format: cacheFormat, Key: key, BPFSum: hex.EncodeToString(sum[:]), BPF: f.BPF,
		Notify: f.Notify, NotifyUnavailable: f.NotifyUnavailable, ProfileHash: f.ProfileHash,
		Arch: f.Arch, DefaultAction: f.DefaultAction, DefaultErrno: f.DefaultErrno, Warnings: f.Warnings, Unknown: f.Unknown,
	}
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
				r = len(e.Reasons)
				reasons[d.Reason] = r
				e.Reasons = append(e.Reasons, d.Reason)
			}
			e.Denials = append(e.Denials, cachedDenial{Nr: nr, Name: d.Name, Errno: d.Errno, Reason: r, Args: d.Args, Quiet: d.Quiet, Default: d.Default})
		}
	}
	return e
}

func (e *cacheEntry) filter() (*Filter, error) {
	f := &Filter{
		BPF: e.BPF, Notify: e.Notify, NotifyUnavailable: e.NotifyUnavailable, ProfileHash: e.ProfileHash,
		Arch: e.Arch, DefaultAction: e.DefaultAction, DefaultErrno: e.DefaultErrno, Warnings: e.Warnings, Unknown: e.Unknown,
		Denials: map[uint32]Denial{}, DenialRules: map[uint32][]Denial{},
	}
	for _, c := range e.Denials {
		if c.Reason < 0 || c.Reason >= len(e.Reasons) {
			return nil, fmt.Errorf("corrupt entry: reason %d of %d", c.Reason, len(e.Reasons))
		}
		d := Denial{Name: c.Name, Errno: c.Errno, Reason: e.Reasons[c.Reason], Args: c.Args, Quiet: c.Quiet, Default: c.Default}
		if _, ok := f.Denials[c.Nr]; !ok {
			f.Denials[c.Nr] = d
		}
		f.DenialRules[c.Nr] = append(f.DenialRules[c.Nr], d)
	}
	return f, nil
}

// Key returns the cache key of compiling p with opts on this system: the
// SHA-256 of the cache format, the profile's canonical JSON, the options,
// the native architecture, the libseccomp version and API level, and the
// kernel release (includes/excludes and notification support depend on it).
func Key(p *Profile, opts Options) (string, error) {
	canon, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	maj, min, mic := seccomp.GetLibraryVersion()
	api, _ := seccomp.GetAPI()
	h := sha256.New()
	for _, part := range []string{
		cacheFormat,
		string(canon),
		"notify=" + strconv.FormatBool(opts.Notify),
		"strict=" + strconv.FormatBool(opts.Strict),
		"arch=" + nativeArch().String(),
		fmt.Sprintf("libseccomp=%d.%d.%d api=%d", maj, min, mic, api),
		"kernel=" + kernel.Release(),
	} {
		fmt.Fprintf(h, "%d:%s\n", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Cache) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Compile returns the compiled filter for p and opts, from the cache when
// an intact entry exists (hit is then true), else by compiling it and
// storing the result. A corrupt entry is compiled anew and overwritten. A
// failure to write the cache is logged, not returned.
func (c *Cache) Compile(ctx context.Context, p *Profile, opts Options) (f *Filter, hit bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	log := c.logger()
	key, err := Key(p, opts)
	if err != nil {
		return nil, false, err
	}
	var path string
	if c.Dir != "" {
		path = filepath.Join(c.Dir, key+".json")
		f, err := readEntry(path, key)
		switch {
		case err == nil:
			log.DebugContext(ctx, "seccomp filter cache hit", "key", key, "path", path, "instructions", f.Instructions())
			return f, true, nil
		case errors.Is(err, fs.ErrNotExist):
		default:
			log.DebugContext(ctx, "seccomp filter cache entry unusable, recompiling", "key", key, "path", path, "error", err)
		}
	}
	f, err = Compile(p, opts)
	if err != nil {
		return nil, false, err
	}
	log.DebugContext(ctx, "seccomp filter compiled", "key", key, "instructions", f.Instructions(),
		"notify", f.Notify, "cached", path != "")
	if path != "" {
		if err := writeEntry(path, key, f); err != nil {
			log.DebugContext(ctx, "seccomp filter cache not written", "path", path, "error", err)
		}
	}
	return f, false, nil
}

func readEntry(path, key string) (*Filter, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e cacheEntry
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("corrupt entry: %w", err)
	}
	switch {
	case e.Format != cacheFormat:
		return nil, fmt.Errorf("corrupt entry: format %q, want %q", e.Format, cacheFormat)
	case e.Key != key:
		return nil, fmt.Errorf("corrupt entry: key %q", e.Key)
	case len(e.BPF) == 0 || len(e.BPF)%bpfInsnSize != 0:
		return nil, errors.New("corrupt entry: no whole BPF program")
	}
	sum := sha256.Sum256(e.BPF)
	if hex.EncodeToString(sum[:]) != e.BPFSum {
		return nil, errors.New("corrupt entry: BPF checksum mismatch")
	}
	return e.filter()
}

func writeEntry(path, key string, f *Filter) error {
	data, err := json.Marshal(newCacheEntry(key, f))
	if err != nil {
		return err
	}
	return hostdirs.WriteFile(path, data)
}
