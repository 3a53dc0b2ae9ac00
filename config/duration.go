package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// parseDuration reads a YAML scalar such as "5s" or "250ms". A bare number is refused because
// its unit would be a guess (seconds? nanoseconds?), and negative durations mean nothing here.
func parseDuration(n *yaml.Node) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("expected a duration such as \"5s\" or \"250ms\", got %s", kindName(n))
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		return 0, fmt.Errorf("duration %s needs a unit, e.g. \"%ss\" or \"%sms\" (units: ns, us, ms, s, m, h)", n.Value, n.Value, n.Value)
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use a number with a unit, e.g. \"5s\", \"250ms\", \"1m30s\"", n.Value)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", n.Value)
	}
	return d, nil
}

// UnmarshalYAML lets Duration be decoded by plain yaml.Unmarshal too, with the same rules as Load.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration the way it is read back, e.g. "1m30s".
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String is time.Duration's form without its trailing zero units: "1m" rather than "1m0s".
func (d Duration) String() string {
	s := d.Duration.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// kindName names a node's kind for error messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing (null)"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// Or is d, or def when d is not positive: how the data planes read a duration of a
// configuration built in code, where a default may not have been filled.
func Or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
