//lint:file-ignore SA1019 the floor is measured on golang.org/x/net/http2, which Ballast's HTTP/2 plane used before its own engine (h2mux), as well as on net/http's own HTTP/2.

// Command h2floor is a measuring tool, not part of Ballast: the cheapest HTTP/2 server that
// the libraries Ballast's HTTP/2 plane is built on allow, answering the 44-byte page of the
// peers' backends itself (no proxying, no backend). Its CPU per request is the floor under any
// proxy built on the same library: run it as scripts/h2peers.sh's second binary,
//
//	go build -o /tmp/h2floor ./scripts/h2floor
//	PEERS_SHARED=../shared/tools/peers bash scripts/h2peers.sh BALLAST 3 20000 /tmp/h2floor
//
// which starts it as `h2floor serve -c DIR/ballast2.yaml`: it serves TLS (h2 by ALPN, with
// DIR/cert.pem and DIR/key.pem) on 127.0.0.1:28296 and h2c (prior knowledge) on
// 127.0.0.1:28297, or on 28292 and 28293 when the file is not ballast2.yaml. H2FLOOR=std uses
// net/http's own HTTP/2 (http.Server with Protocols) instead of golang.org/x/net/http2;
// H2FLOOR=mux uses Ballast's own state machine (package h2mux, on a net.Conn by
// internal/h2muxtest, a goroutine per connection). To measure two floors in one interleaved
// run, give h2peers.sh a wrapper as the second binary:
//
//	printf '#!/bin/sh\nH2FLOOR=mux exec /tmp/h2floor "$@"\n' >/tmp/h2floor-mux && chmod +x /tmp/h2floor-mux
//	PEERS_SHARED=../shared/tools/peers bash scripts/h2peers.sh /tmp/h2floor 5 20000 /tmp/h2floor-mux
package main

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"ballast/internal/h2muxtest"

	"golang.org/x/net/http2"
)

var page = []byte("<html><body><h1>It works!</h1></body></html>")

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: h2floor serve -c DIR/ballast2.yaml (see the package comment)")
	}
	cfg := os.Args[len(os.Args)-1]
	dir := filepath.Dir(cfg)
	tlsAddr, h2cAddr := "127.0.0.1:28292", "127.0.0.1:28293"
	if strings.HasSuffix(cfg, "ballast2.yaml") {
		tlsAddr, h2cAddr = "127.0.0.1:28296", "127.0.0.1:28297"
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write(page)
	})
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	switch os.Getenv("H2FLOOR") {
	case "std":
		serveStd(h, tlsAddr, h2cAddr, certFile, keyFile)
		return
	case "mux":
		serveMux(tlsAddr, h2cAddr, certFile, keyFile)
		return
	}
	serveXNet(h, tlsAddr, h2cAddr, certFile, keyFile)
}

// serveStd serves with net/http's HTTP/2.
func serveStd(h http.Handler, tlsAddr, h2cAddr, certFile, keyFile string) {
	var tp, pp http.Protocols
	tp.SetHTTP1(true)
	tp.SetHTTP2(true)
	pp.SetUnencryptedHTTP2(true)
	ts := &http.Server{Addr: tlsAddr, Handler: h, Protocols: &tp}
	ps := &http.Server{Addr: h2cAddr, Handler: h, Protocols: &pp}
	go func() { log.Fatal(ts.ListenAndServeTLS(certFile, keyFile)) }()
	log.Fatal(ps.ListenAndServe())
}

// serveMux serves with h2mux on internal/h2muxtest's harness.
func serveMux(tlsAddr, h2cAddr, certFile, keyFile string) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		log.Fatal(err)
	}
	srv := &h2muxtest.Server{Page: page, ContentType: "text/html"}
	if _, err := h2muxtest.Listen(srv, tlsAddr, &cert); err != nil {
		log.Fatal(err)
	}
	if _, err := h2muxtest.Listen(srv, h2cAddr, nil); err != nil {
		log.Fatal(err)
	}
	select {}
}

// serveXNet serves with golang.org/x/net/http2's Server on each accepted connection.
func serveXNet(h http.Handler, tlsAddr, h2cAddr, certFile, keyFile string) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http2.Server{}
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Fatal(err)
			}
			go func() {
				if tc, ok := c.(*tls.Conn); ok && tc.Handshake() != nil {
					_ = c.Close()
					return
				}
				srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
			}()
		}
	}
	tl, err := tls.Listen("tcp", tlsAddr, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		log.Fatal(err)
	}
	pl, err := net.Listen("tcp", h2cAddr)
	if err != nil {
		log.Fatal(err)
	}
	go serve(tl)
	serve(pl)
}
