#!/usr/bin/env bash
# Builds the crun that ocifn runs its containers with: Debian's own crun
# source package, the version of Debian's crun binary package, configured
# without what ocifn never uses (systemd cgroups, CRIU, dynamic handlers,
# libgcrypt) and linked statically against musl, with the libraries crun
# needs built from their Debian source packages against musl too. Idempotent:
# a binary built from the pinned versions with these flags is kept. A
# pinned version the suite no longer has is replaced by its current one,
# with a warning (bin/crun.stamp's second line names what was taken).
#
#   hack/crun.sh                     build (or keep) build/crun/bin/crun
#   OUT=dir hack/crun.sh             somewhere else
#   CRUN_DEB_VERSION=V hack/crun.sh  another Debian version of crun's source
#   CRUN_LIBC=glibc hack/crun.sh     link with glibc and Debian's -dev
#                                    packages' static libraries instead
#
# Why: a container is created by executing crun once per call. Debian's
# binary links eleven shared libraries, mostly for systemd; loading them
# costs about 1 ms of CPU on each execution, as much as the rest of crun's
# user-space work (README, Performance). A static binary starts with no
# loader and far fewer page faults. Linked with glibc it still spends most
# of its user-space start-up in glibc's cache-size probing, about 80 `cpuid`
# instructions, each a trap to the hypervisor on a VM (8 µs here); musl
# probes nothing: `crun --version` costs 0.2-0.4 ms of CPU instead of
# 1.4 ms, and a container 0.4 ms less (3.3 instead of 3.7 ms). Everything
# crun does to a container is the same code: same source, same Debian
# patches, same versions of libseccomp, libcap and yajl, plus the small
# fixes in hack/crun-patches, each of which says why.
#
# The musl build, all from Debian bookworm's source packages (pinned below):
#   libseccomp, libcap2   their own build systems, static libraries only;
#   yajl                  its nine C files (its CMake build makes no more);
#   gnulib                argp, which glibc has and musl has not (crun
#                         parses its command line with it), compiled from
#                         gnulib's lib/ with the few settings of a config.h;
#   Linux UAPI headers    linux/, asm/ and asm-generic/ of the host's
#                         linux-libc-dev, through a private include directory
#                         of symlinks (never glibc's /usr/include).
set -euo pipefail

VERSION=${CRUN_DEB_VERSION:-1.8.1-1+deb12u1}
SUITE=${CRUN_DEB_SUITE:-bookworm}
LIBC=${CRUN_LIBC:-musl}
# The Debian source packages the musl build takes crun's libraries from.
MUSL_DEPS=(libseccomp=2.5.4-1+deb12u1 libcap2=1:2.66-4+deb12u3 yajl=2.1.0-3+deb12u2 gnulib=20230209+stable-1)
# What decides the binary besides the versions; a change rebuilds it.
CONFIGURE=(--disable-systemd --disable-criu --disable-dl --disable-shared --enable-static)
# The allocator of the fork server's children wraps libc's four
# (hack/crun-patches/small-allocations-by-bump-in-children.patch).
WRAP_LDFLAGS="-Wl,--wrap=malloc,--wrap=free,--wrap=calloc,--wrap=realloc"
DEP_CFLAGS="-O2"
case $LIBC in
musl) BUILD_DEPS=(build-essential pkg-config python3 gperf linux-libc-dev musl-tools musl-dev) ;;
glibc) BUILD_DEPS=(build-essential pkg-config python3 libseccomp-dev libcap-dev libyajl-dev) ;;
*) echo "crun.sh: CRUN_LIBC is musl or glibc, not $LIBC" >&2; exit 1 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
out=${OUT:-$root/build/crun}
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
shopt -s nullglob
PATCHES=("$root"/hack/crun-patches/*.patch)
shopt -u nullglob
stamp="$VERSION ${CONFIGURE[*]} static $WRAP_LDFLAGS $LIBC $(cat /dev/null "${PATCHES[@]}" | sha256sum | cut -c1-16)"
[[ $LIBC == glibc ]] || stamp+=" ${MUSL_DEPS[*]} $DEP_CFLAGS"
if [[ -x $out/bin/crun && "$(head -n 1 "$out/bin/crun.stamp" 2>/dev/null)" == "$stamp" ]]; then
	exit 0
fi

log() { echo "crun.sh: $*" >&2; }
die() { log "$*"; exit 1; }
# The sources are Debian's whatever the host (Ubuntu has no bookworm), and
# apt checks them with Debian's keys, which an Ubuntu host has only once
# debian-archive-keyring is installed.
"$root/hack/deps.sh" "${BUILD_DEPS[@]}" debian-archive-keyring

mirror=${DEBIAN_MIRROR:-$(host_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The source packages through apt, from the mirror a Debian host uses
# (deb.debian.org on another host, DEBIAN_MIRROR if set), with a
# sources list and package lists of our own: the host's apt state is left
# as it is. apt checks the Sources index against the signed Release file
# and every file of a package against the index.
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
packages=("crun=$VERSION")
[[ $LIBC == glibc ]] || packages+=("${MUSL_DEPS[@]}")
log "fetching the Debian source packages ${packages[*]}"
if ! (cd "$work/src" && apt-get "${apt_opts[@]}" update) >"$work/apt.log" 2>&1; then
	cat "$work/apt.log" >&2
	die "cannot read the package lists of $mirror ($SUITE)"
fi
# A suite keeps only the latest version of a package: once a point release
# replaces a pinned one, the version the suite has now is taken, which the
# log and the stamp's second line name, rather than failing the build
# (ocifn's patches must still apply to it, or the build stops below).
fallback=()
for i in "${!packages[@]}"; do
	pkg=${packages[$i]}
	if ! (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "$pkg") >>"$work/apt.log" 2>&1; then
		(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "${pkg%%=*}") >>"$work/apt.log" 2>&1 ||
			{ cat "$work/apt.log" >&2; die "cannot fetch the source package $pkg, nor any version of it, from $mirror ($SUITE)"; }
		now=$(sed -n 's/^Version: //p' "$work/src/${pkg%%=*}"_*.dsc | head -n 1)
		log "WARNING: $mirror ($SUITE) no longer has $pkg; building from its version $now"
		packages[i]=${pkg%%=*}=$now
		fallback+=("${packages[$i]}")
	fi
done
VERSION=${packages[0]#*=}
[[ $LIBC == glibc ]] || MUSL_DEPS=("${packages[@]:1}")

tarball() { compgen -G "$work/src/$1.tar.*" | grep -v '\.asc$' | head -n 1; }
# unpack PACKAGE=VERSION [FILE...]: the package's upstream tarball (only the
# files matching the FILE patterns, if any) into $work/src/PACKAGE, then
# Debian's packaging and patches, in their order. With FILE patterns, no
# patch may touch the files taken.
unpack() {
	local name=${1%%=*} version=${1#*=} dir
	shift
	version=${version#*:} # the epoch is not in the file names
	dir="$work/src/$name"
	mkdir -p "$dir"
	tar -xf "$(tarball "${name}_${version%-*}.orig")" -C "$dir" --strip-components=1 --wildcards "$@"
	tar -xf "$(tarball "${name}_$version.debian")" -C "$dir"
	[[ -f $dir/debian/patches/series ]] || return 0
	while read -r p _; do
		[[ -z $p || $p == \#* ]] && continue
		if [[ $# -eq 0 ]]; then
			patch -d "$dir" -p1 --quiet <"$dir/debian/patches/$p"
		elif grep -E '^\+\+\+ ' "$dir/debian/patches/$p" | grep -q -E "$(printf '%s\n' "$@" | sed 's/^\*\///; s/\*.*//' | paste -sd'|')"; then
			die "$name's Debian patch $p changes a file this script builds from; build the whole package"
		fi
	done <"$dir/debian/patches/series"
}
unpack "crun=$VERSION"
src=$work/src/crun
# ocifn's own patches, after Debian's (hack/crun-patches, each says why).
for p in "${PATCHES[@]}"; do
	patch -d "$src" -p1 --quiet --forward --fuzz=0 <"$p" || die "cannot apply $p"
done
build_log=$work/build.log
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date -r "$src/configure" +%s)}
# Run a build step quietly; on failure, show the end of its output.
step() {
	if ! "$@" >"$build_log" 2>&1; then
		tail -n 40 "$build_log" >&2
		die "building crun failed ($LIBC)"
	fi
}

configure_env=()
if [[ $LIBC == glibc ]]; then
	# Debian ships yajl's static library as libyajl_s.a.
	mkdir -p "$work/lib"
	ln -s "$(pkg-config --variable=libdir yajl)/libyajl_s.a" "$work/lib/libyajl.a"
	cc=gcc cppflags= ldflags="-L$work/lib"
else
	cc=musl-gcc
	# Prefix of crun's libraries built against musl.
	deps=$work/musl
	mkdir -p "$deps/include/sys" "$deps/include/yajl" "$deps/lib" "$work/uapi"
	# The kernel's UAPI headers, and only them: musl-gcc searches musl's
	# headers, not /usr/include.
	triplet=$(gcc -print-multiarch)
	for d in linux "$triplet/asm" asm-generic; do
		[[ -d /usr/include/$d ]] || die "/usr/include/$d is missing (linux-libc-dev)"
		ln -s "/usr/include/$d" "$work/uapi/${d##*/}"
	done
	# (the prefix map keeps the random work directory out of assert()'s
	# file names, so the binary is the same from one build to the next)
	dep_cc=(musl-gcc $DEP_CFLAGS -ffile-prefix-map="$work"=. -isystem "$work/uapi")

	log "building libseccomp, libcap, yajl and argp against musl"
	unpack "${MUSL_DEPS[0]}"
	(cd "$work/src/libseccomp" &&
		step ./configure CC=musl-gcc CFLAGS="$DEP_CFLAGS" CPPFLAGS="-isystem $work/uapi" \
			--disable-shared --enable-static --disable-python &&
		step make -j"$(nproc)" -C src libseccomp.la)
	cp "$work/src/libseccomp/src/.libs/libseccomp.a" "$deps/lib/"
	cp "$work/src/libseccomp/include/"seccomp{,-syscalls}.h "$deps/include/"

	unpack "${MUSL_DEPS[1]}"
	step make -C "$work/src/libcap2/libcap" CC="${dep_cc[*]}" BUILD_CC=gcc COPTS="$DEP_CFLAGS" libcap.a
	cp "$work/src/libcap2/libcap/libcap.a" "$deps/lib/"
	cp "$work/src/libcap2/libcap/include/sys/capability.h" "$deps/include/sys/"

	# yajl: the version header CMake would write, then the library.
	unpack "${MUSL_DEPS[2]}"
	y=$work/src/yajl
	cp "$y"/src/api/yajl_*.h "$deps/include/yajl/"
	yv() { sed -n "s/^SET (YAJL_$1 \([0-9]*\))/\1/p" "$y/CMakeLists.txt"; }
	sed -e "s/\${YAJL_MAJOR}/$(yv MAJOR)/; s/\${YAJL_MINOR}/$(yv MINOR)/; s/\${YAJL_MICRO}/$(yv MICRO)/" \
		"$y/src/api/yajl_version.h.cmake" >"$deps/include/yajl/yajl_version.h"
	for f in "$y"/src/*.c; do
		step "${dep_cc[@]}" -std=c99 -DYAJL_BUILD -I"$deps/include" -c "$f" -o "${f%.c}.o"
	done
	step ar rcD "$deps/lib/libyajl.a" "$y"/src/*.o

	# argp from gnulib's lib/, with gnulib's getopt under the rpl_ prefix
	# (so nothing clashes with musl's getopt) and a config.h of what
	# gnulib's configure would find in musl.
	unpack "${MUSL_DEPS[3]}" '*/lib/argp*' '*/lib/getopt*' '*/lib/basename-lgpl.*' '*/lib/filename.h' '*/lib/gettext.h'
	a=$work/src/gnulib/lib
	cat >"$a/gl.h" <<'EOF'
#ifndef _GL_INLINE
#define _GL_INLINE inline
#define _GL_EXTERN_INLINE extern inline
#define _GL_INLINE_HEADER_BEGIN
#define _GL_INLINE_HEADER_END
#define _GL_ATTRIBUTE_FORMAT(spec) __attribute__ ((__format__ spec))
#define _GL_ATTRIBUTE_SPEC_PRINTF_STANDARD __printf__
#define _GL_ATTRIBUTE_SPEC_PRINTF_SYSTEM __printf__
#define _GL_ATTRIBUTE_DEALLOC(f, i) __attribute__ ((__malloc__ (f, i)))
#define _GL_ATTRIBUTE_MALLOC __attribute__ ((__malloc__))
#define _GL_ATTRIBUTE_PURE __attribute__ ((__pure__))
#define _GL_ARG_NONNULL(params) __attribute__ ((__nonnull__ params))
#define _GL_UNUSED __attribute__ ((__unused__))
#endif
EOF
	cat >"$a/config.h" <<'EOF'
#define _GNU_SOURCE 1
#include <stdalign.h>
#include <stdbool.h>
#include "gl.h"
#define __GETOPT_PREFIX rpl_
#define HAVE_PROGRAM_INVOCATION_NAME 1
#define HAVE_PROGRAM_INVOCATION_SHORT_NAME 1
#define HAVE_DECL_PROGRAM_INVOCATION_NAME 1
#define HAVE_DECL_PROGRAM_INVOCATION_SHORT_NAME 1
#define HAVE_DECL_FLOCKFILE 1
#define HAVE_DECL_FUNLOCKFILE 1
#define HAVE_DECL_PUTC_UNLOCKED 1
#define HAVE_DECL_FPUTC_UNLOCKED 1
#define HAVE_DECL_FPUTS_UNLOCKED 1
#define HAVE_DECL_FWRITE_UNLOCKED 1
#define HAVE_DECL_STRERROR_R 1
EOF
	cat >"$a/getopt.h" <<'EOF'
#ifndef CRUN_SH_GETOPT_H
#define CRUN_SH_GETOPT_H 1
#include_next <getopt.h>
#define __GETOPT_PREFIX rpl_
#include <getopt-cdefs.h>
#include <getopt-pfx-core.h>
#include <getopt-pfx-ext.h>
#endif
EOF
	sed 's/@HAVE_SYS_CDEFS_H@/0/' "$a/getopt-cdefs.in.h" >"$a/getopt-cdefs.h"
	objs=()
	# argp-pin.c would define program_invocation_name, which musl sets.
	for f in "$a"/argp-{ba,eexst,fmtstream,fs-xinl,help,parse,pv,pvh,xinl}.c "$a"/getopt{,1}.c "$a/basename-lgpl.c"; do
		step "${dep_cc[@]}" -std=gnu11 -I"$a" -include "$a/config.h" -c "$f" -o "${f%.c}.o"
		objs+=("${f%.c}.o")
	done
	step ar rcD "$deps/lib/libargp.a" "${objs[@]}"
	cp "$a"/getopt.h "$a"/getopt-{cdefs,core,ext,pfx-core,pfx-ext}.h "$deps/include/"
	cat "$a/gl.h" "$a/argp.h" >"$deps/include/argp.h"

	cppflags="-isystem $work/uapi -I$deps/include" ldflags="-L$deps/lib"
	# Both configure scripts (crun's and libocispec's) take yajl from
	# here rather than from pkg-config, which knows only the glibc one.
	configure_env=(YAJL_CFLAGS=-I"$deps/include" YAJL_LIBS=-lyajl)
fi

log "building crun $VERSION (static, $LIBC)"
# libgcrypt only keys crun's cache of compiled seccomp filters; ocifn hands
# crun its filter compiled (run.oci.seccomp_bpf_data).
(cd "$src" &&
	step env "${configure_env[@]}" ac_cv_search_gcry_check_version=no \
		./configure CC="$cc" CPPFLAGS="$cppflags" LDFLAGS="$ldflags" "${CONFIGURE[@]}" &&
	# crun's binary only, not its tests; first what the crun target alone
	# does not wait for: the generated headers (libocispec's and crun's
	# version).
	step make -j"$(nproc)" git-version.h libocispec/libocispec.la &&
	step make -j"$(nproc)" crun LDFLAGS="-all-static $ldflags $WRAP_LDFLAGS")
strip -o "$out/bin/crun.tmp" "$src/crun"
features=$("$out/bin/crun.tmp" --version) || die "the built crun does not run"
for f in +CAP +SECCOMP; do
	grep -q -- "$f" <<<"$features" || die "the built crun lacks $f: $features"
done
if ldd "$out/bin/crun.tmp" >/dev/null 2>&1; then
	die "the built crun is dynamically linked"
fi
mv "$out/bin/crun.tmp" "$out/bin/crun"
{
	echo "$stamp"
	[[ ${#fallback[@]} -eq 0 ]] || echo "built from ${fallback[*]} in place of the pinned versions, which $mirror ($SUITE) no longer has"
} >"$out/bin/crun.stamp"
log "built $out/bin/crun ($("$out/bin/crun" --version | head -n 1), $LIBC)"
