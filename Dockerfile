# The ocifn runtime image for users with Docker: the static ocifn binary and
# crun with the libraries it needs; `ocifn serve` as entrypoint.
#
#   docker build -t ocifn .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ocifn ./cmd/ocifn

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends crun \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ocifn /usr/local/bin/ocifn
# gRPC, metrics.
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/ocifn", "serve"]
