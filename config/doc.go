// Package config reads, validates and normalises Ballast's YAML configuration.
//
// Load and Parse are strict: an unknown key, a wrong type or an impossible combination is an
// error naming the file, line, column, field path and what would be valid. They return every
// problem at once, as an Errors value, so that one `ballast check` shows everything to fix.
// The YAML is decoded into a yaml.Node tree and walked alongside the Config struct (rather than
// decoded directly) so that positions are known for every field, and so that defaults can tell
// a key written as 0 ("weight: 0" stays 0) from a key left out (weight 1). Check gives configs
// built in code (the `serve` quick form) the same defaults and validation; there a zero field
// counts as unset. Normalised renders a Config as YAML with every default written out.
//
// Every default is a named constant in defaults.go and is documented in docs/config.md.
//
// Concurrency: a Config is a plain value; once Load, Parse or Check has returned, nothing
// mutates it, so it may be shared between goroutines. Loading has no global state.
package config
