package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildEWMA(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"ewma", "not implemented yet"}
}
