package copilot

import (
	"encoding/json"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// ACPName is the name of Copilot CLI's ACP preset.
const ACPName = "copilot-acp"

// ACP returns Copilot CLI in its Agent Client Protocol mode
// (docs/presets/acp-adapters.md):
//
//	copilot --acp [--model M] [--allow-all-tools] [extra args]
//
// with this preset's credentials (a GitHub token or a BYOK provider),
// configuration, classifiers, storage and bootstrap (the same pinned
// copilot). --allow-all-tools is passed when the turn's permissions
// option allows everything (the default), so the agent asks nothing.
// The CLI's own reports that it sends as message chunks are read by
// ACPText.
func ACP() *harness.Harness {
	return acp.Preset(Harness(), acp.Config{
		Name:      ACPName,
		Program:   Program,
		Args:      []string{"--acp"},
		ModelArgs: []string{"--model", "{model}"},
		AllowArgs: []string{"--allow-all-tools"},
		Reserved:  []string{"-p", "--prompt", "--resume", "--continue", "--output-format", "--allow-all", "--yolo"},
		AgentText: ACPText,
	})
}

var (
	// acpErrorRE are the session.error messages of a failed model call
	// that Copilot CLI 1.0.102 in ACP mode sends as a whole
	// agent_message_chunk "Error: <message>" before it ends the prompt
	// end_turn (measured against the fake Chat Completions API: 429, 500,
	// 401; the connection failure's text is the JSONL mode's, docs
	// cli-facts). Group 1 or 2 is the HTTP status when the text names it.
	acpErrorRE = lazyre.New(`^Error: (?:Failed to get response from the AI model; retried \d+ times \(total retry wait time: [0-9.]+ seconds\) Last error: (\d{3})\b|` +
		`Authentication failed with provider at \S+ \(HTTP (\d{3})\)|Could not connect to (?:local )?model provider at \S+)`)
	// acpRetryRE are its session.info retry notices, sent as chunks
	// "Info: …" (measured: a 500's and a 401's retries; a 429's retries
	// send none).
	acpRetryRE = lazyre.New(`^Info: (?:Request failed due to a transient API error|Response was interrupted due to a server error)\. Retrying\.\.\.$`)
)

// ACPText reads a message chunk of Copilot CLI in ACP mode: the CLI's
// own terminal error (its session.error message after "Error: ") is the
// failure the JSONL preset reports for the same session.error, typed by
// the HTTP status it names (429 rate_limit: quota; 401, 403
// authentication: configuration; other statuses and a failed connection
// query: an outage when 5xx or unreachable); its retry notice is a
// notice of kind retry. Only the CLI's exact texts, whole in one chunk,
// match: the model's streamed text comes as deltas. The GitHub service's
// limit texts ("You've hit your rate limit") are quota as in JSONL mode.
func ACPText(text string) (harness.Event, bool) {
	if strings.HasPrefix(text, "Info: ") && acpRetryRE.MatchString(text) {
		return harness.Event{Type: harness.EventNotice, Kind: "retry", Text: strings.TrimPrefix(text, "Info: ")}, true
	}
	if !strings.HasPrefix(text, "Error: ") {
		return harness.Event{}, false
	}
	msg := strings.TrimPrefix(text, "Error: ")
	typ, status := "", ""
	if m := acpErrorRE.FindStringSubmatch(text); m != nil {
		status = m[1] + m[2]
		switch {
		case status == "429":
			typ = "rate_limit"
		case status == "401" || status == "403":
			typ = "authentication"
		default:
			typ = "query"
		}
	} else if (strings.Contains(msg, "You've") || strings.Contains(msg, "session limit")) && quotaTextRE.MatchString(msg) {
		typ = "rate_limit"
	} else {
		return harness.Event{}, false
	}
	data := obj{"message": msg, "errorType": typ}
	if status != "" {
		data["statusCode"] = json.Number(status)
	}
	return failure(data, ""), true
}
