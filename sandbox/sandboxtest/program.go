package sandboxtest

import (
	"fmt"

	"github.com/outposthq/outpost/sandbox/driver"
)

// Program is one of the small programs the suite runs inside a sandbox. A
// Harness says how to run each (Harness.Command); the behaviour below is
// what the suite expects of it.
type Program int

const (
	// Echo prints its arguments joined by single spaces, then a newline,
	// on stdout, and exits 0.
	Echo Program = iota
	// Stderr prints its arguments like Echo, on stderr.
	Stderr
	// Cat copies stdin to stdout until end of input, and exits 0.
	Cat
	// Exit exits with the status args[0] (0-255).
	Exit
	// Env prints the value of the variable args[0] and a newline (an
	// empty line when unset).
	Env
	// Pwd prints the working directory and a newline.
	Pwd
	// Sleep prints "started\n" (flushed at once), then sleeps args[0]
	// seconds and exits 0. A signal ends it early.
	Sleep
	// WriteFile writes args[1] (without a newline) to the file args[0],
	// whose directory exists.
	WriteFile
	// ReadFile prints the contents of the file args[0].
	ReadFile
	// Spawn starts a background child in the same process group that
	// sleeps for an hour with stdout still open, prints one line naming
	// the child (its pid where the provider has pids) and exits 0 at once,
	// leaving the child running.
	Spawn
	// Big prints args[0] bytes 'x' then a newline, as one line.
	Big
	// Mode prints the permission bits of the file args[0] in octal as
	// `stat -c %a` does, including setuid, setgid and sticky bits (e.g.
	// "755", "4755"), then a newline.
	Mode

	numPrograms // sentinel for iteration; not a program
)

var programNames = [...]string{
	Echo:      "Echo",
	Stderr:    "Stderr",
	Cat:       "Cat",
	Exit:      "Exit",
	Env:       "Env",
	Pwd:       "Pwd",
	Sleep:     "Sleep",
	WriteFile: "WriteFile",
	ReadFile:  "ReadFile",
	Spawn:     "Spawn",
	Big:       "Big",
	Mode:      "Mode",
}

// Programs lists every Program, for harnesses that check their mapping.
func Programs() []Program {
	ps := make([]Program, 0, numPrograms)
	for p := Program(0); p < numPrograms; p++ {
		ps = append(ps, p)
	}
	return ps
}

func (p Program) String() string {
	if p >= 0 && p < numPrograms {
		return programNames[p]
	}
	return fmt.Sprintf("Program(%d)", int(p))
}

// shellScripts are POSIX sh scripts that work with dash, bash and busybox
// sh; the program's arguments are the script's positional parameters.
var shellScripts = [...]string{
	Echo:      `printf '%s\n' "$*"`,
	Stderr:    `printf '%s\n' "$*" >&2`,
	Cat:       `exec cat`,
	Exit:      `exit "$1"`,
	Env:       `eval "v=\${$1-}"; printf '%s\n' "$v"`,
	Pwd:       `pwd`,
	Sleep:     `echo started; exec sleep "$1"`,
	WriteFile: `printf '%s' "$2" > "$1"`,
	ReadFile:  `exec cat "$1"`,
	Spawn:     `sleep 3600 & echo "$!"`,
	Big:       `head -c "$1" /dev/zero | tr '\000' x; echo`,
	Mode:      `exec stat -c %a "$1"`,
}

// Shell is the default Harness.Command: it runs p as a script with
// `/bin/sh -c SCRIPT sh ARGS...`. The scripts need only a POSIX shell and
// cat, sleep, head, tr and stat, and work with busybox as well as with
// dash or bash. The request has no Env, Dir or Stdin: the suite sets them.
func Shell(p Program, args ...string) driver.ExecRequest {
	if p < 0 || p >= numPrograms {
		panic(fmt.Sprintf("sandboxtest: unknown %v", p))
	}
	return driver.ExecRequest{
		Path: "/bin/sh",
		Args: append([]string{"-c", shellScripts[p], "sh"}, args...),
	}
}
