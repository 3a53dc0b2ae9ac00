package config

import (
	"fmt"
	"strings"
)

// Error is one problem in a configuration, located so that an operator can jump to it.
type Error struct {
	File   string // file name, or a label such as "flags" for configs built from the command line
	Line   int    // 1-based; 0 when the problem has no position (a missing top-level key, a config built in code)
	Column int    // 1-based; 0 when unknown
	Path   string // the field path, e.g. pools[0].backends[1].weight; empty for syntax errors
	Msg    string // what is wrong and what would be valid
}

// Error formats the problem as file:line:col: path: message, leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration. Loading collects all of them rather than
// stopping at the first, so that one run of `ballast check` shows everything to fix.
type Errors []*Error

// Error lists the problems one per line, in the order they appear in the file.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the individual problems to errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
