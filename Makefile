# Ballast's build and test entry points. `make test` is what CI runs.
GO ?= go

.PHONY: all build test lint unit bench fuzz-smoke bpf-check

all: build

build:
	$(GO) build -o bin/ballast ./cmd/ballast

# test: everything CI checks, in the order that fails fastest.
test: lint bpf-check unit

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	 if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# unit: every package with -race; the lab's end-to-end scenarios run after the rest, on their
# own, because they compare balancers by throughput and other packages' tests compete for CPU.
unit:
	$(GO) test -race -timeout 20m $$($(GO) list ./... | grep -v '^ballast/lab$$')
	$(GO) test -race -timeout 20m ./lab

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./balance/

fuzz-smoke:
	for f in $$($(GO) test -list 'Fuzz.*' ./balance/ | grep ^Fuzz); do \
	  $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s ./balance/ || exit 1; done

# bpf-check: regenerate the committed bpf2go output (director, realserver, lab, vrrp) and fail if it
# differs from what is committed. Needs clang, llvm and libbpf-dev; skipped without clang.
bpf-check:
	@if ! command -v clang >/dev/null; then echo "bpf-check: no clang, skipped"; exit 0; fi; \
	 $(GO) generate ./director ./realserver ./lab ./vrrp && \
	 git diff --exit-code -- 'director/*_bpfel.*' 'realserver/*_bpfel.*' 'lab/*_bpfel.*' 'vrrp/*_bpfel.*'
