package director

// The BPF program is compiled by bpf2go; its output (director_bpfel.go, director_bpfel.o) is
// committed, so building Ballast needs no clang. Regenerate with `go generate ./director`.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type vip_key -type vip_meta -type real_def -type flow_key -type conn -type nat_origin -type traffic -type director_config -type flow_event director ../bpf/director.c
