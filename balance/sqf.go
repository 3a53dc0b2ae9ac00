package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildSQF(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"sqf", "not implemented yet"}
}
