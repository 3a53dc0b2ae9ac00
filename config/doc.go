// Package config reads, validates and normalises Ballast's YAML configuration. Loading is strict:
// an unknown key, a wrong type or an impossible combination is an error naming the file, line,
// column and what would be valid. A Config is a plain value; once loaded nothing mutates it, so it
// may be shared between goroutines.
package config
