#!/usr/bin/env bash
# Builds the ocifn runtime image (`make image`): the static ocifn binary, the
# static crun of hack/crun.sh (or a given crun with every shared library it
# loads and its loader), and `ocifn serve` as the entrypoint. No daemon and no base image: the image is FROM scratch, built
# with buildah (vfs storage, chroot isolation) from a context staged here.
#
#   hack/runtime-image.sh [OUT]     (OUT defaults to build/ocifn-runtime.tar)
#
# Writes OUT as a docker-archive (what `docker save` gives), named
# ocifn-runtime:VERSION. Environment:
#   VERSION, COMMIT  what the binary and the image labels report
#                    (default: what OCIFN_BIN reports, or from git as the
#                    Makefile does)
#   OCIFN_BIN        use this static ocifn binary instead of building one
#   CRUN             the crun to copy (default: build/crun/bin/crun, built
#                    by hack/crun.sh from Debian's source package)
#
# The image is what `ocifn build` starts a Function package from: the package
# adds /ocifn/function.tar (the default of `ocifn serve --tarball`) and
# package.yaml. Labels: dev.ocifn.version, dev.ocifn.commit,
# dev.ocifn.crun.version.
set -euo pipefail
umask 022

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "runtime-image: $*" >&2; exit 1; }

out=${1:-$REPO_ROOT/build/ocifn-runtime.tar}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
if [ -n "${OCIFN_BIN:-}" ]; then
	# The labels must say what the given binary says of itself.
	first=$("$OCIFN_BIN" version 2>/dev/null | head -n1 || true)
	VERSION=${VERSION:-$(sed -n 's/^ocifn \([^ ]*\) (commit .*/\1/p' <<<"$first")}
	COMMIT=${COMMIT:-$(sed -n 's/^ocifn [^ ]* (commit \([^)]*\)).*/\1/p' <<<"$first")}
fi
VERSION=${VERSION:-$(git -C "$REPO_ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${CRUN:-}" ]; then
	"$REPO_ROOT/hack/crun.sh" || die "cannot build crun (hack/crun.sh)"
	CRUN=$REPO_ROOT/build/crun/bin/crun
fi
CRUN=$(command -v "$CRUN") || die "crun not found: $CRUN"
command -v buildah >/dev/null || die "buildah not found (Debian package buildah; hack/deps.sh installs it)"

# A private work area per output, so concurrent builds (tests) do not meet.
work=$(mktemp -d "${TMPDIR:-/tmp}/ocifn-runtime-image.XXXXXX")
cleanup() {
	if [ -d "$work/storage" ]; then
		buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs rmi --all --force >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
ctx=$work/ctx
root=$ctx/rootfs
mkdir -p "$root"/{usr/local/bin,usr/bin,etc,tmp,proc,sys,dev,ocifn,var/cache/ocifn}
# /tmp and the cache directory are written by whatever uid the pod runs as
# (Crossplane's default is 2000, not root).
chmod 1777 "$root/tmp" "$root/var/cache/ocifn"

# ---------------------------------------------------------------- ocifn
if [ -n "${OCIFN_BIN:-}" ]; then
	cp "$OCIFN_BIN" "$root/usr/local/bin/ocifn"
else
	(cd "$REPO_ROOT" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
		-ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
		-o "$root/usr/local/bin/ocifn" ./cmd/ocifn) || die "go build failed"
fi
chmod 0755 "$root/usr/local/bin/ocifn"
if ldd "$root/usr/local/bin/ocifn" >/dev/null 2>&1; then
	die "ocifn is dynamically linked; build it with CGO_ENABLED=0"
fi

# ---------------------------------------------------------------- crun
cp -L "$CRUN" "$root/usr/bin/crun"
chmod 0755 "$root/usr/bin/crun"
# Every library ldd names (at the path ldd gives) and the loader; none for a
# static crun.
libs=
if ldd "$CRUN" >/dev/null 2>&1; then
	libs=$(ldd "$CRUN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
	[ -n "$libs" ] || die "ldd $CRUN lists no libraries"
fi
for lib in $libs; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
interp=$(ldd "$CRUN" 2>/dev/null | awk '$1 ~ /^\// { print $1; exit }' || true)
[ -z "$interp" ] || [ -e "$root$interp" ] || die "crun's loader $interp was not staged"
crun_version=$("$CRUN" --version | sed -n 's/^crun version //p')
# The staged crun must find every library inside the image root (checked in a
# chroot, so as root only; running crun itself would need /proc, as it
# re-executes itself from a memfd).
if [ -n "$interp" ] && [ "$(id -u)" = 0 ]; then
	resolved=$(chroot "$root" "$interp" --list /usr/bin/crun 2>&1) || die "crun's libraries do not resolve in the image root: $resolved"
	! grep -q 'not found' <<<"$resolved" || die "crun's libraries do not resolve in the image root: $resolved"
fi

# ---------------------------------------------------------------- files
# Names for the ids a pod may run as; nothing reads them at run time.
printf 'root:x:0:0:root:/root:/sbin/nologin\nocifn:x:2000:2000:ocifn:/var/cache/ocifn:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nocifn:x:2000:\nnogroup:x:65534:\n' >"$root/etc/group"

cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin
# gRPC, metrics.
EXPOSE 9443 8080
# The cache directory is given explicitly: the pod's uid (2000 by default)
# has no home directory to put a cache in.
ENTRYPOINT ["/usr/local/bin/ocifn", "serve", "--cache-dir=/var/cache/ocifn"]
EOF

# ---------------------------------------------------------------- build
printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$work/policy.json"
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
buildah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
log=$work/build.log
name=ocifn-runtime:${VERSION//[^A-Za-z0-9_.-]/-}
if ! {
	"${buildah[@]}" bud --isolation chroot --format oci --timestamp 0 --identity-label=false \
		--pull-never --signature-policy "$work/policy.json" --iidfile "$work/iid" \
		--label "dev.ocifn.version=$VERSION" --label "dev.ocifn.commit=$COMMIT" \
		--label "dev.ocifn.crun.version=$crun_version" \
		-f "$ctx/Dockerfile" "$ctx" &&
		"${buildah[@]}" push --signature-policy "$work/policy.json" "$(cat "$work/iid")" "docker-archive:$out.new:$name"
} >"$log" 2>&1 </dev/null; then
	cat "$log" >&2
	rm -f "$out.new"
	die "buildah failed"
fi
mv -f "$out.new" "$out"
echo "runtime-image: built $out ($name, crun $crun_version)"
