//go:build !mcpimage

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
)

// addBackgroundTool registers the background tool: it lists the commands
// run_command started with background: true, reads one's output and stops
// one.
func addBackgroundTool(server *mcp.Server, toolOf toolLookup, p *policy.Policy, logger *slog.Logger) error {
	inSchema, err := jsonschema.For[agent.BackgroundInput](&jsonschema.ForOptions{})
	if err != nil {
		return fmt.Errorf("background input schema: %w", err)
	}
	outSchema, err := jsonschema.For[agent.BackgroundResult](&jsonschema.ForOptions{})
	if err != nil {
		return fmt.Errorf("background output schema: %w", err)
	}
	server.AddTool(&mcp.Tool{
		Name:         agent.BackgroundToolName,
		Title:        "List, read or stop background commands",
		Description:  agent.DescribeBackground(p),
		Annotations:  &mcp.ToolAnnotations{Title: "List, read or stop background commands"},
		InputSchema:  inSchema,
		OutputSchema: outSchema,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		in, err := decodeBackgroundInput(req.Params.Arguments)
		var res agent.BackgroundResult
		if err == nil {
			tool, terr := toolOf(req.Session)
			if terr != nil {
				return toolError(fmt.Errorf("hutch: %w", terr)), nil
			}
			res, err = tool.Background(in) // only an *agent.InputError
		}
		if err != nil {
			logger.Info("background: invalid input", "err", err)
			return toolError(fmt.Errorf("invalid input: %w", err)), nil
		}
		logger.Info("background", "id", in.ID, "stop", in.Stop, "commands", len(res.Commands))
		return backgroundContent(req, res)
	})
	return nil
}

// decodeBackgroundInput decodes the background tool's arguments strictly:
// only its fields, each of its type. Absent arguments list the commands.
func decodeBackgroundInput(raw json.RawMessage) (agent.BackgroundInput, error) {
	var in agent.BackgroundInput
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return in, nil
	}
	return in, decodeArgs(raw, &in, "background takes id and stop", `an object with "id" and "stop", or none`)
}

// backgroundContent is the result as run_command's is (resultContent):
// structured content and a text form with the last mcpTextTail bytes of
// each stream, or, for a client without structured content, the whole
// text.
func backgroundContent(req *mcp.CallToolRequest, res agent.BackgroundResult) (*mcp.CallToolResult, error) {
	if !knowsStructuredContent(req) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: agent.FormatBackground(res, 0)}}}, nil
	}
	structured, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("background: encode the result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: agent.FormatBackground(res, mcpTextTail)}},
		StructuredContent: json.RawMessage(structured),
	}, nil
}
