package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildVNSWRR(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"vnswrr", "not implemented yet"}
}
