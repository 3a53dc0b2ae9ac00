package balance

// TEMPORARY placeholder until the algorithm lands; it refuses to build.
func buildLeastConn(bs []Backend, tier []int, o Options) (Picker, error) {
	return nil, &ConfigError{"leastconn", "not implemented yet"}
}
