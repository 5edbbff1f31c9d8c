package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/otelenv"
	"github.com/outposthq/outpost/server"
)

// tracingShutdown bounds the flush of the spans at exit.
const tracingShutdown = 5 * time.Second

// tracing sets up OpenTelemetry tracing when the OTEL_* variables ask for
// it (docs/metering.md) and returns what flushes the spans at the end. A
// setting outpost cannot honour is said on stderr and tracing stays off:
// the command itself goes on.
func (a *app) tracing(ctx context.Context) func() {
	shutdown, err := otelenv.Setup(ctx, os.Getenv)
	if err != nil {
		fmt.Fprintf(a.stderr, "outpost: tracing is off: %v\n", err)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdown)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			fmt.Fprintf(a.stderr, "outpost: tracing: %v\n", err)
		}
	}
}

// tokenLimits parses --token-limit NAME=PER_HOUR/PER_DAY (either may be
// empty or 0: no limit).
func tokenLimits(list []string) (map[string]server.TokenLimit, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]server.TokenLimit{}
	for _, kv := range list {
		name, v, ok := strings.Cut(kv, "=")
		hour, day, ok2 := strings.Cut(v, "/")
		bad := usageError{fmt.Errorf("--token-limit %q: want NAME=TOKENS_PER_HOUR/TOKENS_PER_DAY", kv)}
		if !ok || !ok2 || name == "" {
			return nil, bad
		}
		var l server.TokenLimit
		for _, f := range []struct {
			s   string
			dst *int64
		}{{hour, &l.PerHour}, {day, &l.PerDay}} {
			if f.s == "" {
				continue
			}
			n, err := strconv.ParseInt(f.s, 10, 64)
			if err != nil || n < 0 {
				return nil, bad
			}
			*f.dst = n
		}
		out[name] = l
	}
	return out, nil
}
