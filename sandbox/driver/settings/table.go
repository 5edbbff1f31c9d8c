package settings

import (
	"fmt"
	"strings"
)

// typeCell is a key's type as the docs show it.
func (k Key) typeCell() string {
	t := k.Kind.String()
	if k.None {
		t += " or `none`"
	}
	return t
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

func codes(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = code(s)
	}
	return strings.Join(out, ", ")
}

// cell is what one provider's column says of a common key: its default
// and, for an enum, its values.
func (k Key) cell() string {
	c := code(k.Default)
	if c == "" {
		c = "✓"
	}
	if k.Kind == Enum {
		c += " (" + codes(k.Values) + ")"
	}
	return c
}

// CommonTable renders the shared keys as a Markdown table with a column
// per provider: the provider's default (✓ without one) and, for an enum,
// its values; — where the provider does not take the key.
func CommonTable(sets ...Set) string {
	var b strings.Builder
	b.WriteString("| key | type | meaning |")
	for _, s := range sets {
		b.WriteString(" " + s.Provider + " |")
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(sets)) + "\n")
	for _, c := range Common {
		fmt.Fprintf(&b, "| %s | %s | %s |", code(c.Name), c.typeCell(), c.Doc)
		for _, s := range sets {
			k, ok := s.Key(c.Name)
			if !ok {
				b.WriteString(" — |")
				continue
			}
			b.WriteString(" " + k.cell() + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Table renders the provider's own keys (not the shared ones) as a
// Markdown table, in declaration order, then the shared keys it takes
// with its remarks on them.
func (s Set) Table() string {
	var b strings.Builder
	var shared []string
	for _, k := range s.Keys {
		if IsCommon(k.Name) {
			note := code(k.Name)
			if k.Note != "" {
				note += ": " + k.Note
			}
			shared = append(shared, "- "+note+"\n")
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
		}
		t := k.typeCell()
		if k.Kind == Enum {
			t = codes(k.Values)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(k.Name), t, code(k.Default), k.Doc)
	}
	if b.Len() == 0 {
		b.WriteString("It has no settings of its own.\n")
	}
	if len(shared) > 0 {
		b.WriteString("\nShared settings it takes ([settings.md](settings.md)):\n\n" + strings.Join(shared, ""))
	}
	return b.String()
}

// Begin and End are the Markdown comments around a generated table; the
// marker names the table ("common" or the provider's name).
func Begin(marker string) string {
	return "<!-- settings:" + marker + " (generated from the declarations; do not edit) -->\n"
}

// End closes a generated table.
const End = "<!-- end settings -->\n"

// Splice returns doc with the text between Begin(marker) and End replaced
// by table, and whether the markers were found.
func Splice(doc, marker, table string) (string, bool) {
	begin := Begin(marker)
	i := strings.Index(doc, begin)
	if i < 0 {
		return doc, false
	}
	j := strings.Index(doc[i:], End)
	if j < 0 {
		return doc, false
	}
	return doc[:i] + begin + table + doc[i+j:], true
}
