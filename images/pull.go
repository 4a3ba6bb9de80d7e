package images

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PullOptions control a pull.
type PullOptions struct {
	// Progress, when set, is told each fetched layer's progress.
	Progress Progress
	// Transport carries the registry's requests (default
	// http.DefaultTransport); it is wrapped so that plain http goes to
	// loopback registries only.
	Transport http.RoundTripper
	// Platform chooses from a multi-platform index (default linux and
	// this machine's architecture).
	Platform *v1.Platform
	// NoUnpack, Flatten: see AddOptions.
	NoUnpack, Flatten bool
}

// Pull fetches ref from its registry into the store. Credentials come from
// the Docker configuration and its credential helpers (the library's
// default keychain); registries on loopback (localhost, 127.0.0.0/8, ::1)
// are reached over plain http, every other one over https only.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (*Report, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if o.Platform != nil {
		plat = *o.Platform
	}
	t := o.Transport
	if t == nil {
		t = http.DefaultTransport
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(plat),
		remote.WithTransport(loopbackHTTPOnly{t}),
		remote.WithUserAgent("hutch"),
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	var index string
	if desc.MediaType.IsIndex() {
		index = desc.Digest.String()
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	// For a digest reference remote.Get checked the manifest (or index)
	// against the digest asked for.
	names := []string{r.Name()}
	rep, err := s.Add(ctx, img, AddOptions{Names: names, Index: index, Progress: o.Progress, NoUnpack: o.NoUnpack, Flatten: o.Flatten, remoteBlobs: true})
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return rep, nil
}

// loopbackHTTPOnly refuses plain-http requests except to loopback
// addresses: the library falls back to http for private (RFC 1918) and
// .local registries too, where a network attacker could then serve any
// manifest for a tag.
type loopbackHTTPOnly struct{ next http.RoundTripper }

func (l loopbackHTTPOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !isLoopbackHost(req.URL.Hostname()) {
		return nil, fmt.Errorf("plain http to %s refused: hutch uses http only for registries on loopback (localhost, 127.0.0.0/8, ::1)", req.URL.Host)
	}
	return l.next.RoundTrip(req)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
