package main

import (
	"errors"
	"flag"
	"io"
	"strings"
)

// newFlagSet is a subcommand's flag set: errors and usage go to stderr, and parsing stops at
// the first error instead of exiting, so that run returns the exit code.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args; when it returns ok false the subcommand returns code: 0 after -h
// (the usage was printed), 2 after a bad flag (the flag package said why).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

// stringList collects a repeated flag such as --backend or -H.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
