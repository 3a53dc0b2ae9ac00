// Package testbin builds a command once for the tests of a package that run it as a child
// process, so that signals, exit codes and output are what an operator sees.
//
// It is used from TestMain only, which runs before any test: there is no concurrency to
// speak of.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds the command pkg (an import path such as "ballast/cmd/ballast") into a temporary
// directory, sets *bin to the binary, runs the tests, removes the directory and exits with the
// tests' code. A failed build exits with 1 before any test runs.
func Main(m *testing.M, pkg string, bin *string) {
	dir, err := os.MkdirTemp("", "ballast-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", *bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
