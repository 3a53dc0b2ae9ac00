//go:build !race

package httpproxy

const raceEnabled = false
