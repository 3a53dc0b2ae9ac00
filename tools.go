//go:build tools

// Package tools pins, for go mod tidy, modules that Ballast uses only in some builds.
package tools

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/coder/websocket"
	_ "github.com/mccutchen/go-httpbin/v2/httpbin"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/valyala/fasthttp"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
	_ "gonum.org/v1/plot"
)
