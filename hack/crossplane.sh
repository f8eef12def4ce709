#!/usr/bin/env bash
# Build the render oracle: the crossplane CLI and its v2 render engine, from
# the Go module proxy, into build/crossplane/. Idempotent: a binary already
# built for the pinned version is kept. `go install M@v` is refused for these
# modules (replace directives), so each is downloaded and built in its own
# module directory, as their DEVELOPERS.md does.
#
#   hack/crossplane.sh            build (or keep) both binaries
#   OUT=dir hack/crossplane.sh    somewhere else
set -euo pipefail

CLI_MODULE=github.com/crossplane/cli/v2
CLI_VERSION=${CROSSPLANE_CLI_VERSION:-v2.5.0}
ENGINE_MODULE=github.com/crossplane/crossplane/v2
ENGINE_VERSION=${CROSSPLANE_ENGINE_VERSION:-v2.3.4}

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build/crossplane}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=$PATH:/usr/local/go/bin
export GOFLAGS=-mod=mod
GO=${GO:-go}

# build MODULE VERSION NAME [REPLACE...]: NAME is rebuilt only when its
# stamp names another version. Each REPLACE (old=new@version) replaces a
# go.mod replace directive that points into the repository: the module zip
# holds no nested modules.
build() {
	local module=$1 version=$2 name=$3
	shift 3
	if [[ -x $out/$name && "$(cat "$out/$name.version" 2>/dev/null)" == "$module@$version" ]]; then
		return
	fi
	local info dir
	# go reports a failed download in the JSON's Error field, on stdout.
	if ! info=$("$GO" mod download -json "$module@$version"); then
		echo "$info" >&2
		echo "crossplane.sh: cannot download $module@$version" >&2
		exit 1
	fi
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
	[[ -n $dir ]] || { echo "$info" >&2; echo "crossplane.sh: go mod download named no directory for $module@$version" >&2; exit 1; }
	echo "crossplane.sh: building $module@$version" >&2
	# The module cache is read-only: -o writes elsewhere, and a copy of
	# go.mod and go.sum (-modfile) takes the replacements and whatever sums
	# go adds.
	local modfile=$out/$name.mod
	cp "$dir/go.mod" "$modfile"
	cp "$dir/go.sum" "${modfile%.mod}.sum"
	chmod u+w "$modfile" "${modfile%.mod}.sum"
	local r
	for r in "$@"; do
		"$GO" mod edit -modfile="$modfile" -replace="$r"
	done
	(cd "$dir" && CGO_ENABLED=0 "$GO" build -modfile="$modfile" -trimpath -o "$out/$name.tmp" ./cmd/crossplane)
	mv "$out/$name.tmp" "$out/$name"
	echo "$module@$version" >"$out/$name.version"
}

build "$CLI_MODULE" "$CLI_VERSION" crossplane
# The engine's go.mod replaces its API module with ./apis, a nested module
# the zip leaves out; the API module of the same tag is on the proxy.
build "$ENGINE_MODULE" "$ENGINE_VERSION" crossplane-engine \
	"github.com/crossplane/crossplane/apis/v2=github.com/crossplane/crossplane/apis/v2@$ENGINE_VERSION"
