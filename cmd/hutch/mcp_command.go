package main

import (
	"time"

	"github.com/urfave/cli/v2"
)

// mcpCommand is `hutch mcp`: an MCP server offering the run_command tool
// (package agent) under the policy that the same flags as `hutch run` make,
// on stdin/stdout (standard output carries the protocol only; logs go to
// standard error) or, with --listen, over the Streamable HTTP transport
// (mcp_http.go).
func mcpCommand() *cli.Command {
	flags := append(policyFlags(),
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` inside, or pass K through from the server's environment, for every command (repeatable)"},
		&cli.StringFlag{Name: "max-output", Usage: "cap of the stdout and of the stderr returned per call, counted as JSON encodes them, e.g. 256KiB (default 1MiB); the rest is dropped"},
		&cli.StringFlag{Name: "security-log", Usage: "append security events (JSON lines) to `FILE` (default: $XDG_STATE_HOME/hutch/security.log)"},
		&cli.BoolFlag{Name: "debug", Usage: "debug logs on stderr"},
	)
	flags = append(flags, mcpHTTPFlags()...)
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the run_command tool to an agent over MCP (stdio, or HTTP with --listen)",
		Description: "An MCP server on standard input and output for agents (docs/AGENTS.md). Its one tool,\n" +
			"run_command, runs a shell command line in a sandbox made from the policy and flags, exactly\n" +
			"as `hutch run` would, and returns stdout, stderr, the exit code and the policy events.\n\n" +
			"With --listen ADDR it serves the MCP Streamable HTTP transport at http://ADDR/mcp instead,\n" +
			"each MCP session with a sandbox of its own (docs/DEPLOY.md): a bearer token from\n" +
			"--token-file is required on any address but loopback, and TLS (--tls-cert, --tls-key) too\n" +
			"unless --allow-plain-http says a proxy in front provides it.",
		Flags:  flags,
		Action: serveMCP,
	}
}

// Defaults of the HTTP server's session bounds.
const (
	defaultMaxSessions = 16
	defaultIdleTimeout = 30 * time.Minute
)

// mcpHTTPFlags are the flags of `hutch mcp --listen`.
func mcpHTTPFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Usage: "serve MCP over HTTP (the Streamable HTTP transport, path /mcp) on `ADDR` (host:port, e.g. 127.0.0.1:8765; port 0 picks one) instead of stdio"},
		&cli.StringFlag{Name: "token-file", Usage: "with --listen: require `FILE`'s content (one line, at least 32 characters, mode 0600 or 0400) as the bearer token of every request; required on a non-loopback address"},
		&cli.StringFlag{Name: "tls-cert", Usage: "with --listen: serve HTTPS with the certificate chain in `FILE` (PEM); needs --tls-key"},
		&cli.StringFlag{Name: "tls-key", Usage: "with --listen: the private key of --tls-cert in `FILE` (PEM)"},
		&cli.BoolFlag{Name: "allow-plain-http", Usage: "with --listen on a non-loopback address: serve plain HTTP (a proxy or service mesh in front provides TLS); the token then crosses the network in clear up to that proxy"},
		&cli.IntFlag{Name: "max-sessions", Value: defaultMaxSessions, Usage: "with --listen: at most `N` MCP sessions (each a sandbox) at a time; an initialize beyond is refused"},
		&cli.StringFlag{Name: "idle-timeout", Value: defaultIdleTimeout.String(), Usage: "with --listen: end an MCP session (and its sandbox) after no request for `DURATION`; 0 never"},
	}
}
