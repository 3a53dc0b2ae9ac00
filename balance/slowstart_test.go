package balance

import (
	"testing"
	"time"
)

func TestSlowStartWeight(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name       string
		weight     int
		elapsed    time.Duration
		window     time.Duration
		aggression float64
		minPercent float64
		want       int
	}{
		{"weight 0 stays 0", 0, 0, 60 * s, 1, 10, 0},
		{"window off", 100, 0, 0, 1, 10, 100},
		{"done at the window", 100, 60 * s, 60 * s, 1, 10, 100},
		{"past the window", 100, time.Hour, 60 * s, 1, 10, 100},
		{"start: the 10 % floor", 100, 0, 60 * s, 1, 10, 10},
		{"elapsed floored to 1 s", 100, 100 * time.Millisecond, 10 * s, 1, 0, 10},
		{"linear half way", 100, 30 * s, 60 * s, 1, 10, 50},
		{"linear 29 %", 100, 29 * s, 100 * s, 1, 0, 29},
		{"aggression 2: sqrt(0.25)", 100, 25 * s, 100 * s, 2, 10, 50},
		{"aggression 0.5: 0.5²", 100, 50 * s, 100 * s, 0.5, 10, 25},
		{"aggression 0.5 under the floor", 100, 20 * s, 100 * s, 0.5, 10, 10},
		{"aggression ≤ 0 is linear", 100, 40 * s, 100 * s, 0, 0, 40},
		{"at least 1", 3, 1 * s, 100 * s, 1, 0, 1},
		{"min percent clamped to 100", 7, 1 * s, 100 * s, 1, 250, 7},
		{"negative min percent is 0", 100, 5 * s, 100 * s, 1, -5, 5},
		{"rounds down", 7, 50 * s, 100 * s, 1, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SlowStartWeight(tc.weight, tc.elapsed, tc.window, tc.aggression, tc.minPercent); got != tc.want {
				t.Fatalf("SlowStartWeight(%d, %v, %v, %g, %g) = %d, want %d",
					tc.weight, tc.elapsed, tc.window, tc.aggression, tc.minPercent, got, tc.want)
			}
		})
	}
}
