package proxyproto

import "io"

var errEOF = io.EOF
