package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCheckCommand runs `ballast check` on good and broken files and on every example.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	e2eWriteFile(t, good, "listeners:\n  - address: 127.0.0.1:8080\npools:\n  - name: web\n    backends:\n      - address: 127.0.0.1:8081\n        weight: 0\n      - address: 127.0.0.1:8082\n")
	bad := filepath.Join(dir, "bad.yaml")
	e2eWriteFile(t, bad, "listeners:\n  - address: 127.0.0.1:8080\npools:\n  - name: web\n    balancer: rr\n    backends:\n      - address: localhost\n        wieght: 2\n")

	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // regexps, in order
		stderr     []string
		emptyStdio bool
	}{
		{"good file", []string{"-c", good}, 0,
			[]string{`(?m)^  - name: 127\.0\.0\.1:8080$`, `(?m)^        weight: 0$`, `(?m)^        weight: 1$`, `(?m)^    balancer: roundrobin$`, `(?m)^    pool: web$`}, nil, false},
		{"bad file lists every error", []string{"-c", bad}, 1, nil, []string{
			regexp.QuoteMeta(bad) + `:5:15: pools\[0\]\.balancer: unknown balancer "rr" \(valid: .*sqf`,
			regexp.QuoteMeta(bad) + `:7:18: pools\[0\]\.backends\[0\]\.address: "localhost" is not host:port`,
			regexp.QuoteMeta(bad) + `:8:9: pools\[0\]\.backends\[0\]\.wieght: unknown key "wieght" .*did you mean "weight"`,
			`3 problems in`,
		}, true},
		{"missing file", []string{"-c", filepath.Join(dir, "nope.yaml")}, 1, nil, []string{`nope\.yaml: open .*no such file`}, true},
		{"stray argument", []string{good}, 2, nil, []string{`unexpected argument`}, true},
	}
	examples, _ := filepath.Glob("../../examples/*.yaml")
	for _, ex := range examples {
		tests = append(tests, struct {
			name       string
			args       []string
			code       int
			stdout     []string
			stderr     []string
			emptyStdio bool
		}{"example " + filepath.Base(ex), []string{"-c", ex}, 0, []string{`(?m)^pools:$`}, nil, false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e2eStart(t, append([]string{"check"}, tt.args...)...)
			if code := p.wait(); code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			out, errs := p.lines(&p.out), p.lines(&p.err)
			for _, re := range tt.stdout {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("stdout does not match %s:\n%s", re, out)
				}
			}
			for _, re := range tt.stderr {
				if !regexp.MustCompile(re).MatchString(errs) {
					t.Errorf("stderr does not match %s:\n%s", re, errs)
				}
			}
			if tt.emptyStdio && strings.TrimSpace(out) != "" {
				t.Errorf("stdout should be empty on failure, got:\n%s", out)
			}
		})
	}
}
