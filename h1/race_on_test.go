//go:build race && linux

package h1

// raceEnabled: the race detector makes the coders about ten times slower; the large
// transfers run fewer cases under it.
const raceEnabled = true
