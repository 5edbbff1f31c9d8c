package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/local"
)

// scratch is a working directory and a conversation store for an
// example, removed by the function it returns.
func scratch() (workdir string, store conversation.Store, cleanup func()) {
	dir, err := os.MkdirTemp("", "outpost-example-")
	if err != nil {
		log.Fatal(err)
	}
	workdir = dir + "/work"
	if err := os.Mkdir(workdir, 0o700); err != nil {
		log.Fatal(err)
	}
	return workdir, conversation.NewFS(dir + "/store"), func() { os.RemoveAll(dir) }
}

// agent is a preset by name, as a turn's agent.
func agent(name string) harness.Agent {
	h, ok := presets.Lookup(name)
	if !ok {
		log.Fatalf("no preset %q", name)
	}
	return harness.Agent{Kind: harness.KindCLI, Harness: h}
}

// A turn: the echo agent answers a prompt in a local sandbox, and the
// conversation is stored for later turns.
func ExampleRun() {
	workdir, store, cleanup := scratch()
	defer cleanup()

	res, err := engine.Run(context.Background(), engine.Turn{
		Agent:   agent("echo"), // or "claude", "codex", ...
		Prompt:  "hello",
		Workdir: workdir,
	}, &engine.RunOptions{
		Provider: local.New(nil),
		Store:    store,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
	fmt.Println("stored:", res.Conversation != "")
	// Output:
	// echo: hello (turn 1)
	// stored: true
}

// The turn's events arrive while it runs, normalized across agents.
func ExampleRun_events() {
	workdir, store, cleanup := scratch()
	defer cleanup()

	var types []string
	_, err := engine.Run(context.Background(), engine.Turn{
		Agent: agent("echo"), Prompt: "list the files #tool", Workdir: workdir,
	}, &engine.RunOptions{
		Provider: local.New(nil),
		Store:    store,
		OnEvent:  func(ev harness.Event) { types = append(types, string(ev.Type)) },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(types, " "))
	// Output:
	// session tool_call tool_result message finished
}

// Resume continues a stored conversation; Fork continues it into a new
// one and leaves it as it was.
func ExampleRun_resumeAndFork() {
	workdir, store, cleanup := scratch()
	defer cleanup()
	opts := &engine.RunOptions{Provider: local.New(nil), Store: store}
	run := func(t engine.Turn) *engine.Result {
		t.Agent, t.Workdir = agent("echo"), workdir
		res, err := engine.Run(context.Background(), t, opts)
		if err != nil {
			log.Fatal(err)
		}
		return res
	}

	first := run(engine.Turn{Prompt: "plan the change"})
	resumed := run(engine.Turn{Prompt: "now do it", Resume: first.Conversation})
	forked := run(engine.Turn{Prompt: "try another way", Fork: first.Conversation})

	fmt.Println(resumed.Text)
	fmt.Println("resumed the same conversation:", resumed.Conversation == first.Conversation)
	fmt.Println(forked.Text)
	fmt.Println("forked into a new one:", forked.Conversation != first.Conversation, forked.Parent == first.Conversation)
	// Output:
	// echo: now do it (turn 2)
	// resumed the same conversation: true
	// echo: try another way (turn 3)
	// forked into a new one: true true
}

// A structured answer: the agent's answer is validated against a JSON
// Schema (repaired when it does not match) and returned as Output.
func ExampleRun_structuredAnswer() {
	workdir, store, cleanup := scratch()
	defer cleanup()

	res, err := engine.Run(context.Background(), engine.Turn{
		Agent: agent("echo"),
		// The echo agent answers what #json= says; a model answers the prompt.
		Prompt:  `Review the change. #json={"verdict":"pass","findings":[]}`,
		Workdir: workdir,
		Output: json.RawMessage(`{
			"type": "object",
			"properties": {"verdict": {"enum": ["pass", "fail"]}, "findings": {"type": "array"}},
			"required": ["verdict", "findings"]
		}`),
	}, &engine.RunOptions{Provider: local.New(nil), Store: store})
	if err != nil {
		log.Fatal(err)
	}
	var review struct {
		Verdict  string   `json:"verdict"`
		Findings []string `json:"findings"`
	}
	if err := json.Unmarshal(res.Output, &review); err != nil {
		log.Fatal(err)
	}
	fmt.Println("verdict:", review.Verdict, "findings:", len(review.Findings))
	// Output:
	// verdict: pass findings: 0
}

// Steering: a message sent to a running turn reaches the agent. A CLI
// that takes live input (Claude Code, Codex, the echo agent) gets it
// inside the turn; the others are stopped, and their conversation resumed
// with it.
func ExampleRun_steering() {
	workdir, store, cleanup := scratch()
	defer cleanup()

	steer := make(chan string, 1)
	sent := false
	res, err := engine.Run(context.Background(), engine.Turn{
		Agent: agent("echo"), Prompt: "a long task #slow=2000", Workdir: workdir,
	}, &engine.RunOptions{
		Provider: local.New(nil),
		Store:    store,
		Steer:    steer,
		OnEvent: func(ev harness.Event) {
			if ev.Type == harness.EventMessage && !sent {
				sent = true
				steer <- "wrap up"
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
	// Output:
	// echo: a long task #slow=2000 (turn 1)
	// steered: wrap up
}

// A docker sandbox: the same turn in a container of an image. The agent's
// pinned CLI is installed in it when the image lacks it.
func ExampleRun_docker() {
	workdir, store, cleanup := scratch()
	defer cleanup()

	provider, err := docker.New(&docker.Options{Image: "outpost/debian:test"})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()
	res, err := engine.Run(context.Background(), engine.Turn{
		Agent: agent("echo"), Prompt: "hello from a container", Workdir: workdir,
	}, &engine.RunOptions{Provider: provider, Store: store})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Sandbox, res.Text)
}
