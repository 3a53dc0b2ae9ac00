package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildP2C(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"p2c", "not implemented yet"}
}
