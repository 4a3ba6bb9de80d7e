package mounts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// The sandbox's /etc is the tooling tree's /etc (the host's, or the
// rootfs's) bound read-only as a whole, so that every toolchain finds the
// configuration it finds on the host (javac its java.security, git its
// gitconfig), minus EtcMask, with hutch's own identity and network files
// (EtcSynthesized) bound over the tree's. One bind instead of one per entry:
// a cold start pays for each mount.

// EtcMask is what the sandbox does not see of the tooling tree's /etc:
// paths relative to /etc, a glob in the last component allowed. A file is
// covered with an empty read-only file, a directory with an empty read-only
// directory; what does not exist is skipped. docs/POLICY.md lists them.
var EtcMask = []MaskRule{
	// Credentials and keys.
	{"shadow", maskCredentials}, {"shadow-", maskCredentials}, {"gshadow", maskCredentials}, {"gshadow-", maskCredentials},
	{"passwd-", maskCredentials}, {"group-", maskCredentials}, {"subuid", maskCredentials}, {"subgid", maskCredentials},
	{"subuid-", maskCredentials}, {"subgid-", maskCredentials}, {"security/opasswd", maskCredentials},
	{"sudoers", maskCredentials}, {"sudoers.d", maskCredentials}, {"doas.conf", maskCredentials},
	{"ssh/ssh_host_*", maskCredentials}, {"ssl/private", maskCredentials}, {"pki/tls/private", maskCredentials},
	{"pki/CA/private", maskCredentials}, {"krb5.keytab", maskCredentials}, {"ipsec.secrets", maskCredentials},
	{"ipsec.d/private", maskCredentials}, {"ppp/chap-secrets", maskCredentials}, {"ppp/pap-secrets", maskCredentials},
	{"openvpn", maskCredentials}, {"wireguard", maskCredentials}, {"docker", maskCredentials},
	{"containers/auth.json", maskCredentials}, {"kubernetes", maskCredentials}, {"rancher", maskCredentials},
	{"letsencrypt", maskCredentials}, {"mysql/debian.cnf", maskCredentials}, {"ldap.secret", maskCredentials},
	{"libnss-ldap.secret", maskCredentials}, {"pam_ldap.secret", maskCredentials}, {"nslcd.conf", maskCredentials},
	{"sssd", maskCredentials}, {"postfix/sasl_passwd", maskCredentials}, {"postfix/sasl_passwd.db", maskCredentials},
	{"exim4/passwd.client", maskCredentials}, {"cups/ssl", maskCredentials},
	// Machine identity (machine-id is synthesized instead).
	{"hostid", maskIdentity}, {"machine-info", maskIdentity},
	// Host network and service configuration.
	{"network", maskHostConfig}, {"netplan", maskHostConfig}, {"NetworkManager", maskHostConfig},
	{"systemd/network", maskHostConfig}, {"wpa_supplicant", maskHostConfig}, {"dhcp", maskHostConfig},
	{"iptables", maskHostConfig}, {"nftables.conf", maskHostConfig}, {"ufw", maskHostConfig},
	{"firewalld", maskHostConfig}, {"hosts.allow", maskHostConfig}, {"hosts.deny", maskHostConfig},
	{"fstab", maskHostConfig}, {"crypttab", maskHostConfig}, {"exports", maskHostConfig},
	{"crontab", maskHostConfig}, {"cron.d", maskHostConfig}, {"anacrontab", maskHostConfig},
	{"audit", maskHostConfig}, {"samba", maskHostConfig},
}

// MaskRule is one entry of EtcMask.
type MaskRule struct {
	// Path is relative to /etc; its last component may be a glob.
	Path string
	// Why is the category: credentials and keys, machine identity, or host
	// network and service configuration.
	Why string
}

const (
	maskCredentials = "credentials and keys"
	maskIdentity    = "machine identity"
	maskHostConfig  = "host network and service configuration"
)

// EtcSynthesized are the /etc files hutch writes itself, in place of the
// tree's: the sandbox's users and groups, its name, its loopback-only
// name resolution, and a machine-id of its own.
var EtcSynthesized = []string{"passwd", "group", "hostname", "hosts", "resolv.conf", "nsswitch.conf", "machine-id"}

// etcData is the content of each synthesized file.
func etcData(s *Spec) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf(
			"root:x:0:0:root:/root:/usr/sbin/nologin\n%s:x:%d:%d:hutch sandbox user:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			s.User, s.UID, s.GID, s.Home),
		"group":    fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", s.User, s.GID),
		"hostname": s.Hostname + "\n",
		"hosts":    fmt.Sprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", s.Hostname),
		// The supervisor answers DNS on the sandbox's loopback (and refuses).
		"resolv.conf":   "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
		"machine-id":    machineID(s.Workspace) + "\n",
	}
}

// machineID is the sandbox's machine-id: stable for a workspace (tools that
// key caches or licences on it keep working between runs), and unrelated to
// the host's.
func machineID(workspace string) string {
	h := sha256.Sum256([]byte("hutch machine-id\x00" + workspace))
	return hex.EncodeToString(h[:16])
}

// addEtcTree adds the sandbox's /etc: the tree's /etc at etcSrc bound
// read-only or, where the tree has none, an /etc of hutch's own.
func addEtcTree(fsys HostFS, p *Plan, etcSrc string) error {
	fi, err := fsys.Lstat(etcSrc)
	switch {
	case err == nil && fi.IsDir():
		p.Add(Step{Kind: Bind, Source: etcSrc, Target: "/etc", ReadOnly: true, Why: "tooling /etc"})
	case err == nil || errors.Is(err, fs.ErrNotExist):
		p.Add(Step{Kind: Mkdir, Target: "/etc", Mode: 0o755})
	default:
		return fmt.Errorf("tooling /etc %s: %w", etcSrc, err)
	}
	return nil
}

// addEtcFiles adds the mask and the synthesized files of /etc, each where
// its path resolves inside the sandbox (a symlink /etc/resolv.conf ->
// ../run/systemd/resolve/stub-resolv.conf gets the file at its target).
// It runs once the mounts such a symlink may lead into are in the plan.
func addEtcFiles(fsys HostFS, p *Plan, s *Spec) error {
	v := view{fsys: fsys, p: p}
	for _, m := range EtcMask {
		targets, err := v.glob("/etc/" + m.Path)
		if err != nil {
			return err
		}
		for _, t := range targets {
			r, err := v.resolve(t)
			if err != nil {
				return err
			}
			switch {
			case r.where != inBind || !r.exists:
			case r.mode.IsDir():
				p.Add(Step{Kind: MaskDir, Target: r.path, Why: "masked /etc: " + m.Why})
			case r.mode.IsRegular():
				p.Add(Step{Kind: MaskFile, Target: r.path, Why: "masked /etc: " + m.Why})
			}
		}
	}
	data := etcData(s)
	for _, n := range EtcSynthesized {
		r, err := v.resolve("/etc/" + n)
		if err != nil {
			return err
		}
		switch {
		case r.where == inBind && r.exists && r.mode.IsRegular():
			p.Add(Step{Kind: Cover, Target: r.path, Mode: 0o644, Data: data[n], Why: "synthesized /etc/" + n})
		case r.where == inRoot && !r.exists && !underLater(s, r.path):
			p.Add(Step{Kind: File, Target: r.path, Mode: 0o644, Data: data[n], Why: "synthesized /etc/" + n})
		default:
			// In a read-only tree without such a file (nothing can be
			// created there), or in a scratch mount: the sandbox has
			// none, as the tree has none.
			continue
		}
		p.Synthesized = append(p.Synthesized, r.path)
	}
	return nil
}

// underLater reports whether p lies where a mount added after /etc's files
// goes (the workspace, an extra read-only bind), which would hide a file
// created there.
func underLater(s *Spec, p string) bool {
	later := []string{s.WorkspaceMount}
	for _, b := range s.ReadOnly {
		later = append(later, b[1])
	}
	for _, t := range later {
		if t != "" && (p == t || strings.HasPrefix(p, strings.TrimSuffix(t, "/")+"/")) {
			return true
		}
	}
	return false
}

// view answers what a path is inside the sandbox, from the plan's mounts
// so far: a path under a bind is the host's file beneath its source; one
// under no mount is in hutch's own root tmpfs, holding only what the plan
// created there.
type view struct {
	fsys HostFS
	p    *Plan
}

// where a resolved path lies.
type where int

const (
	inRoot    where = iota // hutch's root tmpfs
	inBind                 // a read-only bind of a host tree
	inScratch              // any other mount (tmpfs, proc, a read-write bind)
)

// resolved is a path with every symlink followed inside the sandbox.
type resolved struct {
	path   string
	where  where
	exists bool
	mode   fs.FileMode
}

// maxSymlinks bounds symlink resolution, as the kernel does (40).
const maxSymlinks = 40

// mountAt returns the last mount step whose target is p or contains it.
func (v view) mountAt(p string) *Step {
	var m *Step
	for i := range v.p.Steps {
		s := &v.p.Steps[i]
		switch {
		case s.Kind == Bind, s.Kind == Tmpfs, s.Kind == Proc, s.Kind == Devpts, s.Kind == Sysfs:
		case roOverlay(s):
		default:
			continue
		}
		if s.Target == p || s.Target == "/" || strings.HasPrefix(p, s.Target+"/") {
			if m == nil || len(s.Target) >= len(m.Target) {
				m = s
			}
		}
	}
	return m
}

// roOverlay: s is a read-only overlay whose Source shows its view (an
// image's layers: imageEntry), which the view reads like a read-only bind's.
func roOverlay(s *Step) bool { return s.Kind == Overlay && s.Upper == "" && s.Source != "" }

// lstat is one component's lstat inside the sandbox.
func (v view) lstat(p string) (mode fs.FileMode, link string, exists bool, w where, err error) {
	m := v.mountAt(p)
	switch {
	case m == nil:
		for i := len(v.p.Steps) - 1; i >= 0; i-- {
			s := v.p.Steps[i]
			if s.Target != p {
				continue
			}
			switch s.Kind {
			case Symlink:
				return fs.ModeSymlink, s.Data, true, inRoot, nil
			case Mkdir:
				return fs.ModeDir, "", true, inRoot, nil
			case File:
				return 0, "", true, inRoot, nil
			}
		}
		if p == "/" {
			return fs.ModeDir, "", true, inRoot, nil
		}
		// A parent of a step's target is a directory the executor makes.
		for _, s := range v.p.Steps {
			if strings.HasPrefix(s.Target, p+"/") {
				return fs.ModeDir, "", true, inRoot, nil
			}
		}
		return 0, "", false, inRoot, nil
	case !(m.Kind == Bind && m.ReadOnly) && !roOverlay(m):
		return 0, "", false, inScratch, nil
	}
	host := m.Source + strings.TrimPrefix(p, m.Target)
	fi, err := v.fsys.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", false, inBind, nil
	}
	if err != nil {
		return 0, "", false, inBind, fmt.Errorf("lstat %s: %w", host, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = v.fsys.Readlink(host); err != nil {
			return 0, "", false, inBind, fmt.Errorf("readlink %s: %w", host, err)
		}
	}
	return fi.Mode(), link, true, inBind, nil
}

// resolve follows every symlink of p (absolute, inside the sandbox) as
// the kernel would inside the sandbox, with ".." stopping at "/". A path
// that runs into something missing resolves to itself with the rest
// appended, exists false.
func (v view) resolve(p string) (resolved, error) {
	rest := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	cur := "/"
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		mode, link, exists, w, err := v.lstat(next)
		if err != nil {
			return resolved{}, err
		}
		if !exists || w == inScratch {
			return resolved{path: path.Join(append([]string{next}, rest...)...), where: w}, nil
		}
		if mode&fs.ModeSymlink == 0 {
			if len(rest) == 0 {
				return resolved{path: next, where: w, exists: true, mode: mode}, nil
			}
			cur = next
			continue
		}
		if hops++; hops > maxSymlinks {
			// A loop: left alone (ELOOP inside, as on the host).
			return resolved{path: p, where: inScratch}, nil
		}
		if strings.HasPrefix(link, "/") {
			cur = "/"
		}
		rest = append(strings.Split(link, "/"), rest...)
	}
	return resolved{path: cur, where: inRoot, exists: true, mode: fs.ModeDir}, nil
}

// glob expands a glob in p's last component among the entries of its
// (resolved) directory; a p without one is returned as it is.
func (v view) glob(p string) ([]string, error) {
	dir, pat := path.Split(p)
	if !strings.ContainsAny(pat, "*?[") {
		return []string{p}, nil
	}
	r, err := v.resolve(dir)
	if err != nil || !r.exists || r.where != inBind {
		return nil, err
	}
	m := v.mountAt(r.path)
	names, err := v.fsys.ReadDirNames(m.Source + strings.TrimPrefix(r.path, m.Target))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("/etc mask %s: %w", p, err)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if ok, _ := path.Match(pat, n); ok {
			out = append(out, path.Join(r.path, n))
		}
	}
	return out, nil
}
