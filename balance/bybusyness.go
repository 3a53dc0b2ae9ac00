package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildByBusyness(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"bybusyness", "not implemented yet"}
}
