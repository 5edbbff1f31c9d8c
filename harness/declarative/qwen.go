package declarative

import (
	_ "embed"

	"github.com/outposthq/outpost/harness"
)

//go:embed qwen.json
var qwenJSON []byte

// Qwen returns the built-in Qwen Code preset (docs/presets/qwen.md),
// written from the real CLI's measured behaviour (0.24.4):
//
//	qwen --output-format stream-json --approval-mode yolo [--json-schema S]
//	     [--model M] [--resume ID [--fork-session]] [extra args...] < prompt
//
// Qwen Code reports its session id in its first line, keeps each
// conversation in ~/.qwen/projects/<slug of the workdir>/chats/<id>.jsonl
// (moved to the new working directory's folder on restore), and forks
// into a self-contained copy with --fork-session.
func Qwen() *harness.Harness { return builtin("qwen.json", qwenJSON) }

// builtin compiles a built-in preset file; a bad one is a bug.
func builtin(name string, data []byte) *harness.Harness {
	h, err := Parse(name, data, nil)
	if err != nil {
		panic("declarative: the built-in preset " + name + " is invalid: " + err.Error())
	}
	return h
}

//go:embed opencode.json
var opencodeJSON []byte

// OpenCode returns the built-in OpenCode preset (docs/presets/opencode.md),
// written from the real CLI's measured behaviour (1.18.33):
//
//	opencode run --format json --auto [--model P/M]
//	         [--session ID [--fork]] [extra args...] -- prompt
//
// The preset writes a provider "outpost" into OpenCode's configuration
// that reads OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL ({env:...}
// in OpenCode's own syntax). OpenCode keeps every session in one SQLite
// database, captured whole with each conversation.
func OpenCode() *harness.Harness { return builtin("opencode.json", opencodeJSON) }

//go:embed opencode-acp.json
var opencodeACPJSON []byte

// OpenCodeACP returns OpenCode in its Agent Client Protocol mode
// (docs/presets/acp.md): `opencode acp`, with the OpenCode preset's
// provider configuration, credentials, storage and resume step. The model
// is the configuration's (OPENAI_MODEL): `opencode acp` takes none on its
// command line.
func OpenCodeACP() *harness.Harness { return builtin("opencode-acp.json", opencodeACPJSON) }

//go:embed qwen-acp.json
var qwenACPJSON []byte

// QwenACP returns Qwen Code in its Agent Client Protocol mode
// (docs/presets/acp.md): `qwen --acp --auth-type openai`, with the Qwen
// preset's credentials, settings, storage and resume file.
func QwenACP() *harness.Harness { return builtin("qwen-acp.json", qwenACPJSON) }
