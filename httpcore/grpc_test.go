package httpcore

import (
	"testing"
	"time"
)

func TestGRPCTimeoutParse(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true},
		{"2M", 2 * time.Minute, true},
		{"3S", 3 * time.Second, true},
		{"100m", 100 * time.Millisecond, true},
		{"5u", 5 * time.Microsecond, true},
		{"99999999n", 99999999, true},
		{"0m", 0, true},
		{"", 0, false},
		{"m", 0, false},
		{"100", 0, false},
		{"100x", 0, false},
		{"123456789S", 0, false}, // more than 8 digits
		{"-1S", 0, false},
		{"1.5S", 0, false},
		{"+1S", 0, false},
	}
	for _, tt := range tests {
		got, ok := GRPCTimeout(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("GRPCTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1H", "100m", "99999999n", "", "-1S", "+1S", "1.5S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := GRPCTimeout(s)
		if !ok {
			return
		}
		if d < 0 || len(s) > 9 {
			t.Errorf("GRPCTimeout(%q) accepted %v", s, d)
		}
	})
}

func TestGRPCMessageEncoding(t *testing.T) {
	if got := GRPCMessage("a b%c\n\xff"); got != "a b%25c%0A%FF" {
		t.Errorf("got %q", got)
	}
}
