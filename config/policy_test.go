package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" = refused
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"192.0.2.7", "192.0.2.7/32"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"::ffff:192.0.2.7", "192.0.2.7/32"},
		{"::ffff:198.51.100.0/120", "198.51.100.0/24"},
		{" 127.0.0.1 ", "127.0.0.1/32"},
		{"10.0.0.0/33", ""},
		{"fe80::1%eth0", ""},
		{"example.com", ""},
		{"", ""},
		{"10.0.0.0/", ""},
	}
	for _, tc := range tests {
		got, err := ParsePrefixes([]string{tc.in})
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParsePrefixes(%q) = %v, want an error", tc.in, got)
		case tc.want != "" && err != nil:
			t.Errorf("ParsePrefixes(%q): %v", tc.in, err)
		case tc.want != "" && got[0].String() != tc.want:
			t.Errorf("ParsePrefixes(%q) = %s, want %s", tc.in, got[0], tc.want)
		}
	}
}

// FuzzParsePrefixes: never panics; what it accepts is a masked prefix that contains its own
// address and is never an IPv4-mapped form.
func FuzzParsePrefixes(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::ffff:1.2.3.4/104", "x", "1.2.3.4/99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePrefixes([]string{s})
		if err != nil {
			return
		}
		p := ps[0]
		if !p.IsValid() || p != p.Masked() || !p.Contains(p.Addr()) || p.Addr().Is4In6() {
			t.Fatalf("ParsePrefixes(%q) = %v", s, p)
		}
		if _, err := netip.ParsePrefix(p.String()); err != nil {
			t.Fatalf("ParsePrefixes(%q) = %v, which does not parse back", s, p)
		}
	})
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in   string
		want []TemplatePart // nil with ok false = refused
		ok   bool
	}{
		{"plain", []TemplatePart{{Literal: "plain"}}, true},
		{"", nil, true},
		{"${client_ip}", []TemplatePart{{Var: "client_ip"}}, true},
		{"a ${host} b", []TemplatePart{{Literal: "a "}, {Var: "host"}, {Literal: " b"}}, true},
		{"$$${scheme}$$", []TemplatePart{{Literal: "$"}, {Var: "scheme"}, {Literal: "$"}}, true},
		{"${nope}", nil, false},
		{"${host", nil, false},
		{"$5", nil, false},
		{"trailing $", nil, false},
		{"a\r\nX-Evil: 1", nil, false},
	}
	for _, tc := range tests {
		got, err := ParseTemplate(tc.in)
		if (err == nil) != tc.ok || (tc.ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseTemplate(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseTemplate: never panics; an accepted template has no CR/LF/NUL, names only known
// variables, and written back ($ as $$) parses to the same parts.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"a ${host} b", "$$", "${request_id}-${backend}", "${", "$x", "\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, err := ParseTemplate(s)
		if err != nil {
			return
		}
		var back strings.Builder
		for _, p := range parts {
			if p.Var != "" {
				if !oneOf(p.Var, templateVars) {
					t.Fatalf("unknown variable %q from %q", p.Var, s)
				}
				back.WriteString("${" + p.Var + "}")
				continue
			}
			if strings.ContainsAny(p.Literal, "\r\n\x00") {
				t.Fatalf("literal %q from %q", p.Literal, s)
			}
			back.WriteString(strings.ReplaceAll(p.Literal, "$", "$$"))
		}
		again, err := ParseTemplate(back.String())
		if err != nil || !reflect.DeepEqual(again, parts) {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, parts, back.String(), again, err)
		}
	})
}
