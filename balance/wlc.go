package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildWLC(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"wlc", "not implemented yet"}
}
