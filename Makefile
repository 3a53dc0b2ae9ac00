# Ballast's build and test entry points. `make test` is what CI runs.
GO ?= go

.PHONY: all build test lint unit bench fuzz-smoke

all: build

build:
	$(GO) build -o bin/ballast ./cmd/ballast

# test: everything CI checks, in the order that fails fastest.
test: lint unit

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	 if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

unit:
	$(GO) test -race -timeout 20m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./balance/

fuzz-smoke:
	for f in $$($(GO) test -list 'Fuzz.*' ./balance/ | grep ^Fuzz); do \
	  $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s ./balance/ || exit 1; done
