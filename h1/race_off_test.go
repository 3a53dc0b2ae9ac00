//go:build !race && linux

package h1

const raceEnabled = false
