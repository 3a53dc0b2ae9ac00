package sim

import (
	"math/rand/v2"
	"testing"
)

// FuzzRun builds a scenario from fuzzed numbers and checks the model's accounting for every
// algorithm: Run either rejects the scenario or answers each request exactly once.
func FuzzRun(f *testing.F) {
	f.Add(uint64(1), uint8(0))
	f.Add(uint64(42), uint8(3))
	f.Add(uint64(7), uint8(255))
	f.Fuzz(func(t *testing.T, seed uint64, alg uint8) {
		sc := randomScenario(rand.New(rand.NewPCG(seed, seed>>7)))
		names := allAlgorithms()
		name := names[int(alg)%len(names)]
		res, err := Run(sc, name)
		if err != nil {
			t.Fatalf("%s on %+v: %v", name, sc, err)
		}
		checkAccounting(t, sc, res)
	})
}
