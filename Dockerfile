# The ocifn runtime image for users with Docker: the static ocifn binary and
# crun with the libraries it needs; `ocifn serve` as entrypoint. The same
# image as `make image` (hack/runtime-image.sh), which builds it without a
# daemon or a base image; `ocifn build --runtime-image` starts packages from
# either.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t ocifn-runtime .
FROM golang:1.26-bookworm AS build
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/ocifn ./cmd/ocifn

FROM debian:bookworm-slim
ARG VERSION=dev
ARG COMMIT=unknown
RUN apt-get update \
 && apt-get install -y --no-install-recommends crun \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /ocifn /var/cache/ocifn \
 && chmod 1777 /var/cache/ocifn
COPY --from=build /out/ocifn /usr/local/bin/ocifn
# What `ocifn inspect` reports as the runtime (the crun version is only
# known to `make image`, which reads it from the crun it copies).
LABEL dev.ocifn.version=${VERSION} dev.ocifn.commit=${COMMIT}
# gRPC, metrics.
EXPOSE 9443 8080
# The cache directory is given explicitly: the pod's uid (2000 by default)
# has no home directory to put a cache in. /var/cache/ocifn is 1777.
ENTRYPOINT ["/usr/local/bin/ocifn", "serve", "--cache-dir=/var/cache/ocifn"]
