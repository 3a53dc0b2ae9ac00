package vrrp

// The ARP responder (bpf/arp.c) is compiled by bpf2go; its output (arp_bpfel.go, arp_bpfel.o)
// is committed, so building Ballast needs no clang. Regenerate with `go generate ./vrrp`.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type arp_config arp ../bpf/arp.c
