package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildRoundRobin(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"roundrobin", "not implemented yet"}
}
