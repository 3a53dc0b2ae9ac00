package realserver

// The decapsulation program is compiled by bpf2go; its output (decap_bpfel.go, decap_bpfel.o)
// is committed, so building Ballast needs no clang. Regenerate with `go generate ./realserver`.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel decap ../bpf/decap.c
