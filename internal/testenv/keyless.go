package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"testing"
)

// KeylessProbe is a random fake API key and the shell command that, run
// as a tool call of a turn, prints how often the key shows in the
// turn's environment, under its $HOME and in every process's environment
// it can read, and how many variables hold a credential gateway token:
// "env=N home=N procs=N token=N" (KeylessProbeOutput).
func KeylessProbe(tb testing.TB) (key, probe string) {
	tb.Helper()
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	prefix := "sk-kl-" + hex.EncodeToString(b[:4]) + "-"
	key = prefix + hex.EncodeToString(b[4:])
	probe = fmt.Sprintf(`P='%s'; echo "env=$(env | grep -cE "$P") home=$(grep -rlE "$P" "$HOME" 2>/dev/null | wc -l) procs=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -cE "$P") token=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c '=outpost-')"`, prefix+"[0-9a-f]{32}")
	return key, probe
}

// KeylessProbeOutput finds KeylessProbe's line; KeylessNoKey matches it
// when the key was nowhere and a token was there.
var (
	KeylessProbeOutput = regexp.MustCompile(`env=[0-9]+ home=[0-9]+ procs=[0-9]+ token=[0-9]+`)
	KeylessNoKey       = regexp.MustCompile(`^env=0 home=0 procs=0 token=[1-9]`)
)
