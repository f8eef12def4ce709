# ocifn — make any OCI image a Crossplane Composition Function.
#
#   make run       build, start `ocifn serve` on the labelizer example, call it
#   make test      unit and end-to-end tests (installs what is missing)
#   make testdata  build the test function images with buildah
#   make fuzz      every fuzz target for a bounded time (FUZZTIME, default 10s)
#   make soak      5,000 calls from 16 clients over good and faulty functions
#   make bench     what a call costs: ocifn next to the bare program and podman
#   make build     the static ocifn binary in bin/
#   make golden    rewrite the expected outputs of the render and example tests
#   make crossplane build the render oracle (crossplane CLI and engine) in build/
#   make crun      the static crun ocifn runs containers with, in build/crun/bin
#   make image     the runtime image build/ocifn-runtime.tar (buildah, no daemon)
#   make test-cgroupv2  the e2e tests in a pure cgroup v2 guest (qemu; RUN=regexp)
#   make test-cgroupv2-smoke  the part of it CI runs

GO        ?= go
BIN       := bin/ocifn
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
GOTESTFLAGS ?=

export GOFLAGS ?= -mod=mod
# ocifn finds crun on PATH: every target runs the static crun that
# hack/crun.sh builds from Debian's source package (see README,
# Performance), not the dynamically linked one Debian ships.
export PATH := $(CURDIR)/build/crun/bin:$(PATH)

.PHONY: all build deps crun testdata test unit e2e run vet fmt clean image golden fuzz soak bench crossplane test-cgroupv2 test-cgroupv2-smoke

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ocifn

deps:
	@hack/deps.sh
	@hack/crun.sh

crun:
	@hack/crun.sh

# The runtime image `ocifn build` starts packages from: static ocifn, crun and
# its libraries, entrypoint `ocifn serve`. FROM scratch, built with buildah.
image: deps build
	OCIFN_BIN=$(BIN) VERSION=$(VERSION) COMMIT=$(COMMIT) hack/runtime-image.sh build/ocifn-runtime.tar

testdata: deps
	@hack/testdata.sh

# The oracle of the render tests: the crossplane CLI and its render engine,
# built from the Go module proxy into build/crossplane/ (kept between runs).
crossplane:
	@hack/crossplane.sh

test: deps testdata crossplane vet
	$(GO) test $(GOTESTFLAGS) -count=1 ./...
	@FUZZTIME=10s FUZZMINIMIZETIME=0s hack/fuzz.sh

# The e2e tests in a guest that mounts cgroup v2 alone, as Kubernetes nodes
# do (this host is hybrid): Debian's kernel under qemu (TCG), a debootstrap
# root filesystem, both built once into build/cgroupv2. RUN is a go test
# -run regexp (default: every e2e test that needs no Go toolchain or
# buildah in the guest).
test-cgroupv2: deps testdata
	@hack/deps.sh qemu-system-x86 debootstrap cpio kmod e2fsprogs
	hack/cgroupv2/run.sh '$(RUN)'

# What CI runs in the guest (the whole set takes too long under TCG): the
# per-call cgroups, the pod, the unprivileged server, the rlimit fallback
# and the example functions.
CGROUPV2_SMOKE := ^(TestPerCallLimitsInCgroups|TestOOMKillAboveTheCallsLimit|TestPackageBuildPushRunAsPod|TestUnprivileged|TestResourceLimitsWithoutCgroups|TestFunctionsAnswerTheirExamples)$$
test-cgroupv2-smoke:
	@$(MAKE) --no-print-directory test-cgroupv2 RUN='$(CGROUPV2_SMOKE)'

# Every fuzz target for FUZZTIME each (default 10s).
fuzz:
	@hack/fuzz.sh

# The soak test at full size: 5,000 calls from 16 clients (CI runs 300).
soak: deps testdata
	OCIFN_SOAK_CALLS=5000 $(GO) test $(GOTESTFLAGS) -count=1 -v -run '^TestSoak$$' -timeout 30m ./e2e/

# A benchmark, not a test: prints Markdown tables (BENCHFLAGS, e.g.
# "-functions trivial -clients 1 -podman=false"; go run ./bench -h lists
# them). Load comes from ghz, pinned, installed once into BENCHTOOLS.
GHZ_VERSION ?= v0.121.0
BENCHTOOLS  ?= $(HOME)/.cache/ocifn-bench/$(GHZ_VERSION)
bench: deps build testdata
	@hack/deps.sh podman runc
	@test -x $(BENCHTOOLS)/ghz || GOFLAGS= GOBIN=$(abspath $(BENCHTOOLS)) $(GO) install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)
	$(GO) build -o bin/bench-peer ./bench/peer
	$(GO) run ./bench -ocifn $(BIN) -ghz $(BENCHTOOLS)/ghz -peer bin/bench-peer $(BENCHFLAGS)

unit:
	$(GO) test $(GOTESTFLAGS) -count=1 $$($(GO) list ./... | grep -v /e2e)

e2e: deps testdata crossplane
	$(GO) test $(GOTESTFLAGS) -count=1 -v ./e2e/

# Rewrite the expected outputs of the render golden tests (testdata/render)
# and of the examples (examples/*/expected.yaml); review with git diff.
golden: deps testdata
	$(GO) test -count=1 ./e2e/ -run 'TestRenderGolden|TestExamples' -update

run: deps build testdata
	@hack/run.sh

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin build testdata/build
