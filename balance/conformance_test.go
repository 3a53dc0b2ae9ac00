package balance_test

import (
	"testing"

	"ballast/balance"
	"ballast/balance/balancetest"
)

// TestConformance runs the shared contract suite against every registered algorithm.
func TestConformance(t *testing.T) {
	for _, a := range balance.Algorithms() {
		t.Run(a.Name, func(t *testing.T) { balancetest.Run(t, a) })
	}
}
