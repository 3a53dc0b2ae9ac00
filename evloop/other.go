//go:build !linux

package evloop

import "errors"

// Off Linux there are no shards: NewGroup fails and the data planes keep their goroutines.

type Group struct{}

func NewGroup(n int) (*Group, error) { return nil, errors.ErrUnsupported }
