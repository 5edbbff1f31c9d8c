package memsandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults returns a new table of the default programs, which cover what
// sandbox/sandboxtest runs:
//
//	echo ARGS...         prints ARGS joined by spaces and a newline
//	stderr ARGS...       the same on stderr
//	cat [FILE...]        copies the files, or stdin, to stdout
//	exit CODE            exits with CODE
//	getenv NAME          prints $NAME and a newline (an empty line if unset)
//	pwd                  prints the working directory
//	sleep SECONDS        prints "started", then sleeps until signalled or done
//	writefile FILE TEXT  writes TEXT to FILE (mode 0644 when created)
//	readfile FILE        prints FILE
//	spawn                starts a background group member that waits for a
//	                     signal holding stdout open, prints its id, exits 0
//	big N                prints N bytes 'x' and a newline
//	mode FILE            prints FILE's permissions in octal, as stat -c %a
//	true, false          exit 0, exit 1
//
// Wrong arguments print a usage line on stderr and exit 2.
func Defaults() map[string]Program {
	return map[string]Program{
		"echo":      echo,
		"stderr":    stderr,
		"cat":       cat,
		"exit":      exitProg,
		"getenv":    getenv,
		"pwd":       pwd,
		"sleep":     sleep,
		"writefile": writefile,
		"readfile":  readfile,
		"spawn":     spawn,
		"big":       big,
		"mode":      mode,
		"true":      func(context.Context, *Proc) int { return 0 },
		"false":     func(context.Context, *Proc) int { return 1 },
	}
}

// badArgs reports whether p lacks exactly n arguments, printing the
// syntax on stderr if so.
func badArgs(p *Proc, n int, syntax string) bool {
	if len(p.Args) == n {
		return false
	}
	fmt.Fprintf(p.Stderr, "usage: %s\n", syntax)
	return true
}

// fail reports err on stderr and returns 1.
func fail(p *Proc, err error) int {
	fmt.Fprintln(p.Stderr, err)
	return 1
}

func status(err error) int {
	if err != nil {
		return 1
	}
	return 0
}

func echo(_ context.Context, p *Proc) int {
	_, err := fmt.Fprintln(p.Stdout, strings.Join(p.Args, " "))
	return status(err)
}

func stderr(_ context.Context, p *Proc) int {
	_, err := fmt.Fprintln(p.Stderr, strings.Join(p.Args, " "))
	return status(err)
}

// cat copies until end of input, or returns 1 when signalled.
func cat(ctx context.Context, p *Proc) int {
	if len(p.Args) > 0 {
		for _, name := range p.Args {
			data, err := p.FS.ReadFile(name)
			if err != nil {
				return fail(p, err)
			}
			if _, err := p.Stdout.Write(data); err != nil {
				return 1
			}
		}
		return 0
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(p.Stdout, p.Stdin)
		done <- err
	}()
	select {
	case err := <-done:
		return status(err)
	case <-ctx.Done():
		return 1
	}
}

func exitProg(_ context.Context, p *Proc) int {
	if badArgs(p, 1, "exit CODE") {
		return 2
	}
	code, err := strconv.Atoi(p.Args[0])
	if err != nil {
		return fail(p, err)
	}
	return code
}

func getenv(_ context.Context, p *Proc) int {
	if badArgs(p, 1, "getenv NAME") {
		return 2
	}
	_, err := fmt.Fprintln(p.Stdout, p.Env[p.Args[0]])
	return status(err)
}

func pwd(_ context.Context, p *Proc) int {
	_, err := fmt.Fprintln(p.Stdout, p.Dir)
	return status(err)
}

func sleep(ctx context.Context, p *Proc) int {
	if badArgs(p, 1, "sleep SECONDS") {
		return 2
	}
	secs, err := strconv.ParseFloat(p.Args[0], 64)
	if err != nil {
		return fail(p, err)
	}
	if _, err := io.WriteString(p.Stdout, "started\n"); err != nil {
		return 1
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		return 1
	}
}

func writefile(_ context.Context, p *Proc) int {
	if badArgs(p, 2, "writefile FILE TEXT") {
		return 2
	}
	if err := p.FS.WriteFile(p.Args[0], []byte(p.Args[1]), 0o644); err != nil {
		return fail(p, err)
	}
	return 0
}

// fileProgram is a program of one FILE argument, printing what out makes
// of it.
func fileProgram(syntax string, out func(fsys *FS, name string) ([]byte, error)) Program {
	return func(_ context.Context, p *Proc) int {
		if badArgs(p, 1, syntax) {
			return 2
		}
		b, err := out(p.FS, p.Args[0])
		if err != nil {
			return fail(p, err)
		}
		_, err = p.Stdout.Write(b)
		return status(err)
	}
}

var readfile = fileProgram("readfile FILE", (*FS).ReadFile)

var mode = fileProgram("mode FILE", func(fsys *FS, name string) ([]byte, error) {
	fi, err := fsys.Stat(name)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "%o\n", unixMode(fi.Mode())), nil
})

var children atomic.Int64

func spawn(_ context.Context, p *Proc) int {
	p.Go(func(ctx context.Context) { <-ctx.Done() })
	_, err := fmt.Fprintf(p.Stdout, "child-%d\n", children.Add(1))
	return status(err)
}

func big(ctx context.Context, p *Proc) int {
	if badArgs(p, 1, "big N") {
		return 2
	}
	n, err := strconv.Atoi(p.Args[0])
	if err != nil || n < 0 {
		return fail(p, fmt.Errorf("big: bad size %q", p.Args[0]))
	}
	chunk := bytes.Repeat([]byte{'x'}, 32<<10)
	for n > 0 {
		if ctx.Err() != nil {
			return 1
		}
		k := min(n, len(chunk))
		if _, err := p.Stdout.Write(chunk[:k]); err != nil {
			return 1
		}
		n -= k
	}
	_, err = io.WriteString(p.Stdout, "\n")
	return status(err)
}
