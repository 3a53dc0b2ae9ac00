//go:build !linux

package sockio

// Relay is Linux-only: off Linux there are no bare descriptors to relay (see Accept).
type Relay struct{}

func NewRelay() *Relay { return &Relay{} }

// Forward ends the pair at once off Linux.
func (r *Relay) Forward(f RelayFlow) { go f.Done(false) }
