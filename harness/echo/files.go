package echo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileOp is a #write=PATH, #append=PATH or #rm=PATH directive: a file
// change the agent makes through its shell tool, confined to its working
// directory.
type fileOp struct {
	verb, name string
}

// errOutside is the refusal of a path that leaves the working directory.
var errOutside = errors.New("outside the working directory")

// fileOps are the file directives of prompt, in order.
func fileOps(prompt string) []fileOp {
	var ops []fileOp
	for _, f := range strings.Fields(prompt) {
		verb, name, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			continue
		}
		switch verb {
		case "#write", "#append", "#rm":
			ops = append(ops, fileOp{verb: verb, name: name})
		}
	}
	return ops
}

// files runs the file directives as shell tool calls. The agent works in
// its working directory only (the server's default agent takes prompts
// from the network): an absolute path, a ".." that climbs out, or a
// symbolic link that leads out is refused, with an error tool result and a
// denied line, and changes nothing; the other directives still run.
func (a *agent) files(t *turnState) {
	ops := fileOps(t.prompt)
	if len(ops) == 0 {
		return
	}
	root, err := os.OpenRoot(".")
	if root != nil {
		defer root.Close()
	}
	for _, op := range ops {
		id := fmt.Sprintf("tool-%d", t.n)
		cmd, _ := json.Marshal(map[string]string{"command": strings.TrimPrefix(op.verb, "#") + " " + op.name})
		a.emit(line{Type: "tool_call", ID: id, Name: "shell", Input: cmd})
		opErr := err
		if opErr == nil {
			opErr = op.run(root)
		}
		if opErr == nil {
			a.emit(line{Type: "tool_result", ID: id, Output: "ok"})
			continue
		}
		a.emit(line{Type: "tool_result", ID: id, Output: opErr.Error(), Error: true})
		if errors.Is(opErr, errOutside) {
			a.emit(line{Type: "denied", ID: id, Name: "shell", Text: fmt.Sprintf("echo: %s=%s refused: %v", op.verb, op.name, opErr)})
		}
	}
}

// run makes the change inside root. The path is checked lexically first
// (absolute, or climbing out with ".."), then os.Root refuses, component
// by component, any symbolic link that leads out.
func (op fileOp) run(root *os.Root) error {
	if filepath.IsAbs(op.name) || !filepath.IsLocal(op.name) {
		return fmt.Errorf("%s is %w", op.name, errOutside)
	}
	name := op.name
	var err error
	switch op.verb {
	case "#write":
		err = root.MkdirAll(filepath.Dir(name), 0o755)
		if err == nil {
			err = root.WriteFile(name, []byte("written by echo\n"), 0o644)
		}
	case "#append":
		var f *os.File
		if f, err = root.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			_, err = f.WriteString("appended by echo\n")
			err = errors.Join(err, f.Close())
		}
	case "#rm":
		err = root.Remove(name)
	}
	if escapes(err) {
		return fmt.Errorf("%s leads %w through a symbolic link", op.name, errOutside)
	}
	return err
}

// escapes reports whether err is os.Root's refusal of a path that leaves
// the root, which has no exported sentinel: its message, at the bottom of
// the chain of path errors.
func escapes(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if _, ok := err.(*fs.PathError); !ok && err.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}
