# ocifn — make any OCI image a Crossplane Composition Function.
#
#   make run       build, start `ocifn serve` on the labelizer example, call it
#   make test      unit and end-to-end tests (installs what is missing)
#   make testdata  build the test function images with buildah
#   make build     the static ocifn binary in bin/

GO        ?= go
BIN       := bin/ocifn
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
GOTESTFLAGS ?=

export GOFLAGS ?= -mod=mod

.PHONY: all build deps testdata test unit e2e run vet fmt clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ocifn

deps:
	@hack/deps.sh

testdata: deps
	@hack/testdata.sh

test: deps testdata vet
	$(GO) test $(GOTESTFLAGS) -count=1 ./...

unit:
	$(GO) test $(GOTESTFLAGS) -count=1 $$($(GO) list ./... | grep -v /e2e)

e2e: deps testdata
	$(GO) test $(GOTESTFLAGS) -count=1 -v ./e2e/

run: deps build testdata
	@hack/run.sh

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin testdata/build
