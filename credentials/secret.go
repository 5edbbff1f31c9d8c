package credentials

import (
	"math"
	"regexp"
	"strings"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// The secret recogniser: one rule, used for redaction (which values of
// .outpost/.env and explicit --env or API env values are masked) and for
// the environment (which values of .outpost/.env reach the agent only
// through a credential plan). A variable is secret when its name or its
// value says so.

// secretWords are the name fragments that mark a secret, matched anywhere
// in the upper-cased name (DBPASS, GH_PAT_CRED, SESSION_ID, …).
var secretWords = []string{
	"KEY", "TOKEN", "SECRET", "PASS", "PWD", "CRED", "AUTH",
	"PRIVATE", "SESSION", "COOKIE",
}

// notSecretWords are words that contain a secret word without naming a
// secret; they are removed from the name before matching. AUTHORIZ stays
// a secret (AUTHORIZATION).
var notSecretWords = []string{"AUTHOR", "BYPASS", "PASSTHROUGH", "PASSTHRU", "COMPASS"}

// notSecretNames are the shell's own variables that contain a secret word.
var notSecretNames = map[string]bool{"PWD": true, "OLDPWD": true}

// LooksSecret reports whether a variable name suggests its value is a
// secret: it contains KEY, TOKEN, SECRET, PASS (PASSWORD, PASSWD, DBPASS),
// PWD, CRED (CREDENTIAL), AUTH (AUTHORIZATION), PRIVATE, SESSION or
// COOKIE, in any case. Words that only contain one are not counted: AUTHOR
// (but AUTHORIZATION is), BYPASS, PASSTHROUGH, PASSTHRU, COMPASS; nor are
// the shell's PWD and OLDPWD. False positives cost redacted output, and a
// .outpost/.env value that reaches the agent only through a credential plan.
func LooksSecret(name string) bool {
	u := strings.ToUpper(name)
	if notSecretNames[u] {
		return false
	}
	u = strings.ReplaceAll(u, "AUTHORIZ", "AUTHIZ")
	for _, w := range notSecretWords {
		u = strings.ReplaceAll(u, w, "")
	}
	for _, w := range secretWords {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// keyPrefixes are the prefixes providers give their keys and tokens.
var keyPrefixes = []string{
	"sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", // OpenAI (sk-proj-), Anthropic (sk-ant-), Stripe, …
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", // GitHub
	"glpat-", "gldt-", "glrt-", // GitLab
	"xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xapp-", // Slack
	"AKIA", "ASIA", // AWS access key ids
	"AIza", "ya29.", // Google API keys and OAuth access tokens
	"hf_", "npm_", "pypi-", "SG.", "dop_v1_", "shpat_", // Hugging Face, npm, PyPI, SendGrid, DigitalOcean, Shopify
	"eyJ", // a JSON Web Token ({" in base64)
}

// minKeyBody is how many token characters must follow a key prefix.
const minKeyBody = 16

// keyShape matches a known prefix at the start of a word followed by at
// least minKeyBody token characters, and a PEM block's header.
var keyShape = lazyre.New(keyShapeExpr())

func keyShapeExpr() string {
	alts := make([]string, len(keyPrefixes))
	for i, p := range keyPrefixes {
		alts[i] = regexp.QuoteMeta(p)
	}
	return `(?:^|[^A-Za-z0-9_\-])((?:` + strings.Join(alts, "|") + `)[A-Za-z0-9_.\-]{16,})` +
		`|-----BEGIN [A-Z0-9 ]+-----`
}

// urlPassword matches the password of a URL's user information
// (postgres://user:password@host/db).
var urlPassword = lazyre.New(`[A-Za-z][A-Za-z0-9+.\-]*://[^/?#\s:@]*:([^/?#\s@]+)@`)

// The high-entropy rule (see KeyShaped).
const (
	minEntropyLen     = 32  // characters in the run
	minEntropyBits    = 4.0 // Shannon entropy, bits per character
	minClassSwitching = 0.4 // share of neighbours of different classes
)

// KeyShaped returns the parts of value that have the shape of a key, nil
// when none has:
//
//   - a known provider prefix (sk-, sk-ant-, sk-proj-, ghp_, gho_,
//     github_pat_, glpat-, xoxb-, AKIA, AIza, hf_, npm_, eyJ for a JSON Web
//     Token, … see keyPrefixes) at the start of a word (not after a
//     letter, digit, '_' or '-'), followed by at least 16 characters of
//     letters, digits, '_', '-' and '.';
//   - a PEM block (-----BEGIN …-----): the whole value;
//   - the password of a URL (scheme://user:password@host);
//   - a high-entropy run: at least 32 characters of letters, digits, '+',
//     '_' and '-' (any other character, such as '/', '.', ':', '=' or a
//     space, ends a run), with an upper-case letter, a lower-case letter
//     and a digit, a Shannon entropy of at least 4.0 bits per character,
//     and at least 40% of neighbouring characters of different classes
//     (lower, upper, digit, other). Random base62 or base64 strings pass
//     with a probability of 99.1% at 32 characters, 99.7% at 40 (measured
//     over 100,000 draws each); paths, words, UUIDs
//     and hex digests (a single case), snake_case names and CamelCase
//     identifiers (long runs of lower case) do not.
//
// A value holding a key somewhere ("Bearer sk-…", "--token ghp_…") gives
// that key, so it is masked wherever it shows alone.
func KeyShaped(value string) []string {
	var parts []string
	for _, m := range keyShape.FindAllStringSubmatch(value, -1) {
		if m[1] == "" { // a PEM block: all of it
			return []string{value}
		}
		parts = append(parts, m[1])
	}
	for _, m := range urlPassword.FindAllStringSubmatch(value, -1) {
		parts = append(parts, m[1])
	}
	for _, run := range strings.FieldsFunc(value, func(r rune) bool { return !isRunChar(r) }) {
		if highEntropy(run) && !overlaps(parts, run) {
			parts = append(parts, run)
		}
	}
	return parts
}

// overlaps reports whether run holds one of parts or is held by one.
func overlaps(parts []string, run string) bool {
	for _, p := range parts {
		if strings.Contains(p, run) || strings.Contains(run, p) {
			return true
		}
	}
	return false
}

func isRunChar(r rune) bool {
	return charClass(r) < 3 || r == '+' || r == '_' || r == '-'
}

// charClass is 0 for lower case, 1 upper case, 2 digits, 3 anything else.
func charClass(r rune) int {
	switch {
	case 'a' <= r && r <= 'z':
		return 0
	case 'A' <= r && r <= 'Z':
		return 1
	case '0' <= r && r <= '9':
		return 2
	}
	return 3
}

// highEntropy is the high-entropy rule of KeyShaped for one run of ASCII
// run characters.
func highEntropy(run string) bool {
	if len(run) < minEntropyLen {
		return false
	}
	var classes [4]int
	var counts [128]int
	switches := 0
	for i := 0; i < len(run); i++ {
		c := charClass(rune(run[i]))
		classes[c]++
		counts[run[i]]++
		if i > 0 && c != charClass(rune(run[i-1])) {
			switches++
		}
	}
	if classes[0] == 0 || classes[1] == 0 || classes[2] == 0 {
		return false
	}
	bits := 0.0
	for _, n := range counts {
		if n > 0 {
			p := float64(n) / float64(len(run))
			bits -= p * math.Log2(p)
		}
	}
	return bits >= minEntropyBits && float64(switches) >= minClassSwitching*float64(len(run)-1)
}

// IsSecret reports whether a variable is a secret: its name looks secret
// (LooksSecret) or its value holds something shaped like a key
// (KeyShaped).
func IsSecret(name, value string) bool {
	return LooksSecret(name) || len(KeyShaped(value)) > 0
}

// SecretValues returns what to redact for a variable: nil when it is not
// a secret (IsSecret), otherwise its value and each key-shaped part of it.
func SecretValues(name, value string) []string {
	parts := KeyShaped(value)
	if len(parts) == 0 && !LooksSecret(name) {
		return nil
	}
	out := []string{value}
	for _, p := range parts {
		if p != value {
			out = append(out, p)
		}
	}
	return out
}
