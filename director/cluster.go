package director

import (
	"fmt"
	"net/netip"

	"ballast/balance"
)

// tableKey is a real server's ID in the Maglev table: its address, prefixed with the cluster
// seed when there is one, so that another cluster's permutations (and tables) differ.
func tableKey(seed uint32, a netip.Addr) string {
	if seed == 0 {
		return a.String()
	}
	return fmt.Sprintf("%08x/%s", seed, a)
}

// Table is the Maglev table a director with Options.Seed seed and Options.TableSize size
// builds for a VIP whose usable real servers are reals (weights > 0): slot -> real server
// address. It is a pure function of the set of (address, weight) pairs and the seed, which
// is what lets every director of a cluster place a flow the same way.
func Table(seed uint32, reals []Real, size int) ([]netip.Addr, error) {
	ids := make([]string, len(reals))
	ws := make([]int, len(reals))
	for i, r := range reals {
		ids[i], ws[i] = tableKey(seed, r.Addr), r.Weight
	}
	pos, err := balance.MaglevTable(ids, ws, size)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, len(pos))
	for i, p := range pos {
		out[i] = reals[p].Addr
	}
	return out, nil
}

// Usable counts, per VIP, the real servers that may take new flows now (up, weight > 0,
// next hop resolved): 0 means the VIP's packets are dropped. It reads the director's own
// state, not the maps, and is cheap enough to poll.
func (d *Director) Usable() (map[VIP]int, error) {
	out := map[VIP]int{}
	err := d.do(func() error {
		for _, vs := range d.st.vips {
			n := 0
			for _, r := range vs.reals {
				if d.st.usable(r) {
					n++
				}
			}
			out[vs.vip] = n
		}
		return nil
	})
	return out, err
}
