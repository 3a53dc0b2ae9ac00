package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildMaglev(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"maglev", "not implemented yet"}
}
