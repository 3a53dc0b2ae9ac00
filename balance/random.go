package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildRandom(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"random", "not implemented yet"}
}
