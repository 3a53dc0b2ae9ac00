package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print Ballast's version and build", run: runVersion})
}

func runVersion(_ []string, stdout, _ io.Writer) int {
	version, revision := "(devel)", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	fmt.Fprintf(stdout, "ballast %s (revision %s, %s, %s/%s)\n", version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
