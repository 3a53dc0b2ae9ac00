package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildCARP(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"carp", "not implemented yet"}
}
