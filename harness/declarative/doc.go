// Package declarative builds agent presets from files: a user who wants
// outpost to run another CLI writes a JSON file (docs/presets/custom.md)
// instead of Go. The file says which program to run and with which
// arguments, where the prompt goes (an argument, standard input or a
// temporary file), how to read the CLI's output (plain text, or JSON lines
// read through field paths), which texts mean a quota, an outage or a
// refused setup, where the CLI keeps its conversations, and whether they
// can be resumed and forked.
//
// Parse and Load validate a file completely and compile it into an
// ordinary *harness.Harness, so a declarative preset runs through the same
// turn engine, events and error model as the Go presets. A bad file is an
// *outpost.Error with code configuration whose message names the field.
//
// Aider is a built-in preset written in this format (aider.json, embedded).
//
// Like every preset package, this one imports nothing of outpost but the
// root and harness.
package declarative
