package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/harness/kit/lazyre"
	"github.com/outposthq/outpost/sandbox"
)

// storeEnv names the store when --store is not given.
const storeEnv = "OUTPOST_STORE"

// store opens the conversation store once per command: --store, else
// $OUTPOST_STORE, else the filesystem store in conversation.DefaultDir.
// A PostgreSQL connection string (a postgres:// or postgresql:// URL, or
// key=value pairs) opens the PostgreSQL store; a clean path is a
// directory; anything else is a configuration error. Turns spooled for
// this store are pushed first.
func (a *app) store() (conversation.Store, error) {
	if a.opened != nil {
		return a.opened, nil
	}
	spec := a.storeFlag
	if spec == "" {
		spec = os.Getenv(storeEnv)
	}
	s, id, err := a.openStore(spec)
	if err != nil {
		return nil, err
	}
	spoolDir, err := conversation.DefaultSpoolDir(id)
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "store", err)
	}
	a.opened, a.spool = s, conversation.NewSpool(spoolDir)
	if !a.noAutoPush {
		// The spool first: a turn that could not be stored goes in before
		// anything reads the store. A store still down is reported by
		// whatever comes next.
		_ = a.push(a.ctx, s, false)
	}
	return s, nil
}

// openStore opens the store spec names and returns it with the name its
// spool is kept under (never holding a password).
func (a *app) openStore(spec string) (conversation.Store, string, error) {
	switch {
	case postgres.IsConnString(spec):
		return a.openPostgres(spec)
	case spec == "":
		dir, err := conversation.DefaultDir()
		if err != nil {
			return nil, "", outpost.Wrap(outpost.Configuration, "store", err)
		}
		return conversation.NewFS(dir), dir, nil
	case strings.Contains(spec, "://"):
		return nil, "", outpost.Errorf(outpost.Configuration, "store", "unknown store %q: want a directory or a postgres:// URL", withoutPassword(spec))
	case !cleanPath(spec):
		// Not echoed: a mistyped connection string may hold a password.
		return nil, "", outpost.New(outpost.Configuration, "store", "the store is neither a directory path nor a PostgreSQL connection string (postgres://... or key=value pairs such as host=/run/postgresql dbname=outpost); a directory name may not hold '=' or control characters")
	}
	dir, err := filepath.Abs(spec)
	if err != nil {
		return nil, "", outpost.Wrap(outpost.Configuration, "store", err)
	}
	return conversation.NewFS(dir), dir, nil
}

func (a *app) openPostgres(spec string) (conversation.Store, string, error) {
	ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	defer cancel()
	ps, err := postgres.Open(ctx, spec, nil)
	if errors.Is(err, postgres.ErrNewerSchema) || errors.Is(err, conversation.ErrInvalid) {
		return nil, "", outpost.Wrap(outpost.Configuration, "store", err)
	}
	if err != nil {
		return nil, "", outpost.Wrap(outpost.Conversation, "store", err)
	}
	a.closers = append(a.closers, ps.Close)
	return ps, withoutPassword(spec), nil
}

// cleanPath reports whether spec can name the filesystem store's
// directory: no '=' (a connection string gone wrong, which would put its
// password in a directory name) and no control characters.
func cleanPath(spec string) bool {
	return !strings.ContainsFunc(spec, func(r rune) bool { return r == '=' || unicode.IsControl(r) })
}

// push stores the spooled turns, reporting each on stderr (verbose: on
// stdout, for sync).
func (a *app) push(ctx context.Context, s conversation.Store, verbose bool) error {
	pctx, cancel := context.WithTimeout(ctx, sandbox.ReleaseTimeout)
	defer cancel()
	pushed, err := a.spool.Push(pctx, s)
	out := a.stderr
	if verbose {
		out = a.stdout
	}
	failed := false
	for _, p := range pushed {
		switch {
		case p.Err != nil:
			failed = true
			fmt.Fprintf(a.stderr, "outpost: spooled conversation %s not stored: %v\n", p.File, p.Err)
		case p.Stored != p.ID:
			fmt.Fprintf(out, "stored spooled turn of %s as %s, a fork: %s moved on meanwhile\n", p.ID, p.Stored, p.ID)
		default:
			fmt.Fprintf(out, "stored spooled turn of %s\n", p.ID)
		}
	}
	if err != nil {
		return outpost.Wrap(outpost.Conversation, "sync", err)
	}
	if failed {
		return outpost.Errorf(outpost.Conversation, "sync", "some spooled conversations could not be stored (they stay in %s)", a.spool.Dir())
	}
	return nil
}

var passwordKV = lazyre.New(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

// withoutPassword returns a store URL or connection string without its
// password, to name the store (spool directory, messages).
func withoutPassword(spec string) string {
	if u, err := url.Parse(spec); err == nil && u.Scheme != "" {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return passwordKV.ReplaceAllString(spec, "${1}xxxxx")
}
