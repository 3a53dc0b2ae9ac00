package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildRingHash(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"ringhash", "not implemented yet"}
}
