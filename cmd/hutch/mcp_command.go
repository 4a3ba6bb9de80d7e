package main

import "github.com/urfave/cli/v2"

// mcpCommand is `hutch mcp`: an MCP server on stdin/stdout offering the
// run_command tool (package agent) under the policy that the same flags as
// `hutch run` make. Standard output carries the protocol only; logs go to
// standard error.
func mcpCommand() *cli.Command {
	flags := append(policyFlags(),
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` inside, or pass K through from the server's environment, for every command (repeatable)"},
		&cli.StringFlag{Name: "max-output", Usage: "cap of the stdout and of the stderr returned per call, counted as JSON encodes them, e.g. 256KiB (default 1MiB); the rest is dropped"},
		&cli.StringFlag{Name: "security-log", Usage: "append security events (JSON lines) to `FILE` (default: $XDG_STATE_HOME/hutch/security.log)"},
		&cli.BoolFlag{Name: "debug", Usage: "debug logs on stderr"},
	)
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the run_command tool to an agent over MCP (stdio)",
		Description: "An MCP server on standard input and output for agents (docs/AGENTS.md). Its one tool,\n" +
			"run_command, runs a shell command line in a sandbox made from the policy and flags, exactly\n" +
			"as `hutch run` would, and returns stdout, stderr, the exit code and the policy events.",
		Flags:  flags,
		Action: serveMCP,
	}
}
