// Command aider is a stand-in for aider, the Python CLI, which cannot be
// installed where outpost's tests run. It is built only from aider's
// published documentation (the options reference and the scripting page):
// the flags outpost passes, the markdown chat history it keeps
// (--chat-history-file, "#### " before each user message,
// --restore-chat-history), its input history, the model keys it reads from
// the environment, its plain (--no-pretty, --no-stream) output with a
// "Tokens: ... sent, ... received." line, and its litellm error lines
// followed by "Retrying in N seconds..." for transient errors. What the
// documentation does not say (exit statuses, the exact banner) is a guess,
// listed in docs/presets/aider.md.
//
// Prompt directives simulate the hard cases: AIDER_QUOTA, AIDER_AUTH,
// AIDER_OUTAGE, AIDER_RETRY (one transient error, then an answer),
// AIDER_RETRY_FOREVER, AIDER_EDIT.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var known = map[string]bool{ // flags that take no value
	"--yes-always": true, "--no-pretty": true, "--no-stream": true, "--no-check-update": true,
	"--analytics-disable": true, "--restore-chat-history": true, "--no-auto-commits": true,
	"--no-git": true, "--no-show-model-warnings": true,
}

var valued = map[string]bool{"--message-file": true, "-f": true, "--model": true, "--chat-history-file": true, "--input-history-file": true}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	vals := map[string]string{}
	flags := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, hasV := strings.Cut(a, "=")
		switch {
		case valued[name]:
			if !hasV {
				if i+1 >= len(args) {
					fmt.Fprintf(os.Stderr, "aider: error: argument %s: expected one argument\n", name)
					return 2
				}
				i++
				v = args[i]
			}
			vals[name] = v
		case known[a]:
			flags[a] = true
		default:
			fmt.Fprintf(os.Stderr, "usage: aider [-h] ...\naider: error: unrecognized arguments: %s\n", a)
			return 2
		}
	}
	mf := vals["--message-file"]
	if mf == "" {
		mf = vals["-f"]
	}
	if mf == "" {
		fmt.Fprintln(os.Stderr, "stand-in: only --message-file mode is simulated")
		return 2
	}
	msg, err := os.ReadFile(mf)
	if err != nil {
		fmt.Printf("Error: unable to read message file %s\n", mf)
		return 1
	}
	prompt := strings.TrimSpace(string(msg))
	model := vals["--model"]
	if model == "" {
		model = "gpt-4o"
	}
	chat := vals["--chat-history-file"]
	if chat == "" {
		chat = ".aider.chat.history.md"
	}
	input := vals["--input-history-file"]
	if input == "" {
		input = ".aider.input.history"
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...); out.Flush() }

	p("Aider v0.86.1")
	p("Main model: %s with diff edit format", model)
	p("Git repo: none")
	p("Repo-map: disabled")

	turn := 1
	if flags["--restore-chat-history"] {
		if b, err := os.ReadFile(chat); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "#### ") {
					turn++
				}
			}
		}
	}
	now := time.Now().UTC().Format("2006-01-02 15:04:05")
	appendFile(input, fmt.Sprintf("\n# %s\n+%s\n", now, strings.ReplaceAll(prompt, "\n", "\n+")))
	appendFile(chat, fmt.Sprintf("\n# aider chat started at %s\n\n#### %s\n", now, strings.ReplaceAll(prompt, "\n", "\n#### ")))

	key := os.Getenv("OPENAI_API_KEY") + os.Getenv("ANTHROPIC_API_KEY")
	switch {
	case key == "" || strings.Contains(prompt, "AIDER_AUTH"):
		p("litellm.AuthenticationError: AnthropicException - invalid x-api-key")
		p("The API provider is not able to authenticate you. Check your API key.")
		return 0
	case strings.Contains(prompt, "AIDER_QUOTA"):
		for i := 0; i < 2; i++ {
			p("litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your current quota, please check your plan and billing details.")
			p("The API provider has rate limited you. Try again later or check your quotas.")
			p("Retrying in %.1f seconds...", 0.2*float64(i+1))
		}
		p("litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your current quota, please check your plan and billing details.")
		return 0
	case strings.Contains(prompt, "AIDER_OUTAGE"):
		p("litellm.InternalServerError: AnthropicException - Overloaded")
		p("Retrying in 0.2 seconds...")
		p("litellm.InternalServerError: AnthropicException - Overloaded")
		p("The API provider's servers are down or overloaded.")
		return 0
	case strings.Contains(prompt, "AIDER_RETRY_FOREVER"):
		for {
			p("litellm.APIConnectionError: Connection error.")
			p("Retrying in 0.2 seconds...")
			time.Sleep(20 * time.Millisecond)
		}
	case strings.Contains(prompt, "AIDER_RETRY"):
		p("litellm.APIConnectionError: Connection error.")
		p("Retrying in 0.2 seconds...")
	}
	reply := fmt.Sprintf("aider: %s (turn %d)\nDone.", prompt, turn)
	p("%s", reply)
	if strings.Contains(prompt, "AIDER_EDIT") {
		p("Applied edit to hello.py")
		p("Commit 1a2b3c4 feat: Add hello.py")
	}
	sent := 2000 + 100*turn
	tokens := fmt.Sprintf("Tokens: %.1fk sent, %d received. Cost: $0.0074 message, $0.0074 session.", float64(sent)/1000, len(strings.Fields(reply)))
	p("%s", tokens)
	appendFile(chat, fmt.Sprintf("\n%s\n\n> %s\n", reply, tokens))
	return 0
}

func appendFile(path, s string) {
	os.MkdirAll(filepath.Dir(path), 0o700)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		os.Exit(1)
	}
	defer f.Close()
	f.WriteString(s)
}
