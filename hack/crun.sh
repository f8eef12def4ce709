#!/usr/bin/env bash
# Builds the crun that ocifn runs its containers with: Debian's own crun
# source package, the version of Debian's crun binary package, configured
# without what ocifn never uses (systemd cgroups, CRIU, dynamic handlers,
# libgcrypt) and linked statically. Idempotent: a binary built from the
# pinned version with these flags is kept.
#
#   hack/crun.sh                     build (or keep) build/crun/bin/crun
#   OUT=dir hack/crun.sh             somewhere else
#   CRUN_DEB_VERSION=V hack/crun.sh  another Debian version of the source
#
# Why: a container is created by executing crun once per call. Debian's
# binary links eleven shared libraries, mostly for systemd; loading them
# costs about 1 ms of CPU on each execution, as much as the rest of crun's
# user-space work (README, Performance). The static binary starts with no
# loader and far fewer page faults. Everything crun does to a container is
# the same code: same source, same patches.
set -euo pipefail

VERSION=${CRUN_DEB_VERSION:-1.8.1-1+deb12u1}
SUITE=${CRUN_DEB_SUITE:-bookworm}
# What decides the binary besides the version; a change rebuilds it.
CONFIGURE=(--disable-systemd --disable-criu --disable-dl --disable-shared --enable-static)
BUILD_DEPS=(build-essential pkg-config libseccomp-dev libcap-dev libyajl-dev)

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
out=${OUT:-$root/build/crun}
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
stamp="$VERSION ${CONFIGURE[*]} static"
if [[ -x $out/bin/crun && "$(cat "$out/bin/crun.stamp" 2>/dev/null)" == "$stamp" ]]; then
	exit 0
fi

log() { echo "crun.sh: $*" >&2; }
"$root/hack/deps.sh" "${BUILD_DEPS[@]}"

mirror=${DEBIAN_MIRROR:-$(host_mirror)}
[[ -n $mirror ]] || { log "no Debian mirror in the host's apt sources; set DEBIAN_MIRROR"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The source package through apt, from the mirror the host uses, with a
# sources list and package lists of our own: the host's apt state is left
# as it is. apt checks the Sources index against the signed Release file
# and every file of the package against the index.
mkdir -p "$work/apt/lists/partial" "$work/apt/sources" "$work/src"
cat >"$work/apt/sources/crun-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: $SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work/apt/sources"
	-o "Dir::State::lists=$work/apt/lists" -o APT::Sandbox::User=root -o Acquire::Languages=none)
log "fetching the Debian source package crun $VERSION"
if ! (cd "$work/src" && apt-get "${apt_opts[@]}" update && apt-get "${apt_opts[@]}" source --download-only "crun=$VERSION") >"$work/apt.log" 2>&1; then
	cat "$work/apt.log" >&2
	log "cannot fetch the source package crun=$VERSION from $mirror ($SUITE)"
	exit 1
fi
upstream=${VERSION%-*}
tarball() { compgen -G "$work/src/$1.tar.*" | grep -v '\.asc$' | head -n 1; }
tar -xf "$(tarball "crun_$upstream.orig")" -C "$work/src"
src="$work/src/crun-$upstream"
tar -xf "$(tarball "crun_$VERSION.debian")" -C "$src"
# Debian's patches, in their order.
if [[ -f $src/debian/patches/series ]]; then
	while read -r p _; do
		[[ -z $p || $p == \#* ]] && continue
		patch -d "$src" -p1 --quiet <"$src/debian/patches/$p"
	done <"$src/debian/patches/series"
fi

# Debian ships yajl's static library as libyajl_s.a.
mkdir -p "$work/lib"
ln -s "$(pkg-config --variable=libdir yajl)/libyajl_s.a" "$work/lib/libyajl.a"
log "building crun $VERSION (static)"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date -r "$src/configure" +%s)}
if ! (cd "$src" &&
	# libgcrypt only keys crun's cache of compiled seccomp filters; ocifn
	# hands crun its filter compiled (run.oci.seccomp_bpf_data).
	ac_cv_search_gcry_check_version=no ./configure "${CONFIGURE[@]}" &&
	make -j"$(nproc)" LDFLAGS="-all-static -L$work/lib") >"$work/build.log" 2>&1; then
	tail -n 40 "$work/build.log" >&2
	log "building crun failed"
	exit 1
fi
strip -o "$out/bin/crun.tmp" "$src/crun"
"$out/bin/crun.tmp" --version >/dev/null
if ldd "$out/bin/crun.tmp" >/dev/null 2>&1; then
	log "the built crun is dynamically linked"
	exit 1
fi
mv "$out/bin/crun.tmp" "$out/bin/crun"
echo "$stamp" >"$out/bin/crun.stamp"
log "built $out/bin/crun ($("$out/bin/crun" --version | head -n 1))"
