package config

import (
	"bytes"
	"fmt"
	"os"
	"sort"

	"go.yaml.in/yaml/v3"
)

// Load reads, decodes, completes with defaults and validates the configuration file at path.
// On failure the error is an Errors value listing every problem found, each with its position.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	return Parse(path, data)
}

// Parse is Load for bytes already in memory; name labels the errors (usually the file name).
func Parse(name string, data []byte) (*Config, error) {
	d := &decoder{file: name, seen: map[string]pos{}}
	c := &Config{}
	if !d.parse(data, c) {
		return nil, sorted(d.errs)
	}
	// Defaults and cross-field checks run even after decoding errors, so that one run reports
	// everything; they keep quiet about the values that failed to decode.
	if err := d.finish(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Check completes a Config built in code (the `serve` quick form, tests) with the defaults and
// validates it exactly like Load does. As there is no file, a zero field counts as unset, so
// a backend's Weight 0 becomes 1 here: set Down to keep a backend out instead. source labels
// the errors, e.g. "flags".
func Check(source string, c *Config) error {
	d := &decoder{file: source}
	return d.finish(c)
}

// finish applies the defaults then validates; it returns nil or the sorted Errors.
func (d *decoder) finish(c *Config) error {
	d.defaults(c)
	d.validate(c)
	if len(d.errs) == 0 {
		return nil
	}
	return sorted(d.errs)
}

// sorted orders problems as they appear in the file; those without a position come last.
func sorted(es Errors) Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return es
}

// Normalised is the configuration as YAML with every default written out: what `ballast check`
// prints, and a file that loads back to the same Config.
func (c *Config) Normalised() []byte {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		// Config holds only strings, numbers, bools, slices and Durations: encoding cannot fail.
		panic(fmt.Sprintf("config: encoding a Config: %v", err))
	}
	_ = enc.Close()
	return buf.Bytes()
}
