//go:build !mcpimage

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/background"
)

// bgExec is an executor with a background: a detached "command" prints
// its argv and runs until it is signalled.
type bgExec struct {
	writeExec
	tab background.Table
}

func (e *bgExec) Detach(req agent.ExecRequest) (string, error) {
	c, err := e.tab.Start(req.Argv, func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (background.Outcome, error) {
		fmt.Fprintf(stdout, "serving %s\n", req.Argv[2])
		select {
		case s := <-sigs:
			return background.Outcome{ExitCode: 128 + int(s.(syscall.Signal))}, nil
		case <-ctx.Done():
			return background.Outcome{ExitCode: 125}, nil
		}
	})
	if err != nil {
		return "", err
	}
	return c.ID, nil
}

func (e *bgExec) Background() *background.Table { return &e.tab }

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	return res, string(sc)
}

// With a session that runs commands in the background, the server offers
// the background tool beside run_command: start, list, read, stop.
func TestMCPBackground(t *testing.T) {
	e := &bgExec{}
	cs := connect(t, e)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 2 || tools.Tools[0].Name != agent.BackgroundToolName && tools.Tools[1].Name != agent.BackgroundToolName {
		t.Fatalf("tools/list: %+v, %v", tools, err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == agent.ToolName && !strings.Contains(tl.Description, "background: true is the exception") {
			t.Errorf("run_command's description does not mention background commands:\n%s", tl.Description)
		}
	}
	res, sc := call(t, cs, agent.ToolName, map[string]any{"command": "python3 -m http.server 8080", "background": true})
	if res.IsError || !strings.Contains(sc, `"background_id":"1"`) || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "background_id: 1\n") {
		t.Fatalf("background start: %+v %s", res, sc)
	}
	res, sc = call(t, cs, agent.BackgroundToolName, nil)
	if res.IsError || !strings.Contains(sc, `"command":"python3 -m http.server 8080"`) || !strings.Contains(sc, `"running":true`) || strings.Contains(sc, `"stdout"`) {
		t.Errorf("list: %s", sc)
	}
	for i := 0; ; i++ {
		res, sc = call(t, cs, agent.BackgroundToolName, map[string]any{"id": "1"})
		if strings.Contains(sc, `"stdout":"serving python3 -m http.server 8080\n"`) {
			break
		}
		if i == 100 {
			t.Fatalf("output: %s", sc)
		}
	}
	res, sc = call(t, cs, agent.BackgroundToolName, map[string]any{"id": "1", "stop": true})
	if res.IsError || !strings.Contains(sc, `"running":false`) || !strings.Contains(sc, `"exit_code":143`) || !strings.Contains(sc, `"stopped":true`) {
		t.Errorf("stop: %s", sc)
	}
	for args, want := range map[string]map[string]any{
		`invalid input: no background command "9": call background without an id to list them`: {"id": "9"},
		`invalid input: stop needs the id of the command to stop`:                              {"stop": true},
		`invalid input: unknown argument "kill": background takes id and stop`:                 {"kill": true},
		`invalid input: argument "id": want a string, got JSON number`:                         {"id": 1},
	} {
		res, _ := call(t, cs, agent.BackgroundToolName, want)
		if !res.IsError || res.Content[0].(*mcp.TextContent).Text != args {
			t.Errorf("%v: %+v, want the error %q", want, res.Content, args)
		}
	}
	res, _ = call(t, cs, agent.ToolName, map[string]any{"command": "x", "background": true, "fresh": true})
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "background and fresh cannot be combined") {
		t.Errorf("background with fresh: %+v", res.Content)
	}
}

// Without a session there is no background tool, and background: true is
// refused in words.
func TestMCPBackgroundWithoutSession(t *testing.T) {
	cs := connect(t, writeExec{})
	if tools, err := cs.ListTools(context.Background(), nil); err != nil || len(tools.Tools) != 1 {
		t.Fatalf("tools/list: %+v, %v", tools, err)
	}
	res, _ := call(t, cs, agent.ToolName, map[string]any{"command": "x", "background": true})
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "background commands need a session") {
		t.Errorf("background without a session: %+v", res.Content)
	}
}
