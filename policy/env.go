package policy

import (
	"fmt"
	"sort"
	"strings"
)

// DefaultPath is PATH inside the sandbox when the caller has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CommandEnv computes the command's environment: the caller's variables
// that Environment.Pass allows, then Environment.Set, then the sandbox's
// identity (HOME, USER, LOGNAME, SHELL), then extra ("K=V" sets, "K" passes
// the caller's K through). Nothing else of host leaks in.
func (p *Policy) CommandEnv(host []string, extra []string) ([]string, error) {
	return p.Environment.CommandEnv(host, extra)
}

// CommandEnv is Policy.CommandEnv for this environment section.
func (e Environment) CommandEnv(host []string, extra []string) ([]string, error) {
	hostMap := map[string]string{}
	for _, kv := range host {
		if k, v, ok := strings.Cut(kv, "="); ok {
			hostMap[k] = v
		}
	}
	out := map[string]string{}
	for k, v := range hostMap {
		if passes(e.Pass, k) {
			out[k] = v
		}
	}
	for k, v := range e.Set {
		out[k] = v
	}
	if _, ok := out["PATH"]; !ok {
		out["PATH"] = DefaultPath
	}
	out["HOME"] = SandboxHome
	out["USER"] = "sandbox"
	out["LOGNAME"] = "sandbox"
	out["SHELL"] = "/bin/sh"
	for _, e := range extra {
		k, v, hasValue := strings.Cut(e, "=")
		if !validEnvName(k) {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE or NAME, where NAME is letters, digits and _ not starting with a digit", e)
		}
		if hasValue {
			out[k] = v
		} else if hv, ok := hostMap[k]; ok {
			out[k] = hv
		}
	}
	env := make([]string, 0, len(out))
	for k, v := range out {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, nil
}

func passes(pass []string, name string) bool {
	for _, p := range pass {
		if strings.HasSuffix(p, "*") {
			if strings.HasPrefix(name, strings.TrimSuffix(p, "*")) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}
