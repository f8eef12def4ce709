#!/usr/bin/env bash
# Builds the image of the function __NAME__ into function.tar, the file
# `docker save` writes and `ocifn test`, `ocifn render` and `ocifn build` read.
#
#   ./build.sh                  BUILDER: buildah, docker or podman (default: the first found)
#
# The Dockerfile starts FROM scratch and copies pieces that this script stages
# in stage/ from the build machine, so nothing is pulled from a registry and
# the image holds only what the function needs (a Dockerfile changed to
# start FROM an image has it pulled, by buildah as by docker and podman):
#
#   stage/base     /etc/passwd, /etc/group, /tmp and the usual empty directories
#   stage/busybox  a shell and the usual tools       (Debian/Ubuntu: apt-get install busybox-static)
#   stage/jq       jq and the libraries it links to  (Debian/Ubuntu: apt-get install jq)
#   stage/yq       yq v4 (github.com/mikefarah/yq), a static binary: $YQ, or built with `go install`
#
# Only the pieces the Dockerfile copies (COPY or ADD stage/<piece>/) are staged.
# Environment: BUILDER; IMAGE, the image name (default localhost/__NAME__:latest);
# OUT, the output file (default function.tar); YQ, a static yq v4 binary.
# Staging needs a Linux machine (jq's libraries are the host's); on another
# system, run this script in a Linux container or VM.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

YQ_VERSION=v4.44.3
image=${IMAGE:-localhost/__NAME__:latest}
out=${OUT:-function.tar}
work=.build

die() { echo "build.sh: $*" >&2; exit 1; }

stage_base() {
	mkdir -p stage/base/{bin,etc,dev,proc,sys,tmp}
	chmod 1777 stage/base/tmp
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >stage/base/etc/passwd
	printf 'root:x:0:\nnogroup:x:65534:\n' >stage/base/etc/group
}

# is_static FILE: true for a statically linked executable.
is_static() { ! ldd "$1" >/dev/null 2>&1; }

stage_busybox() {
	local bb applet
	bb=$(command -v busybox) || die "busybox not found (Debian/Ubuntu: apt-get install busybox-static)"
	is_static "$bb" || die "$bb is linked dynamically; the image needs a static one (Debian/Ubuntu: apt-get install busybox-static)"
	mkdir -p stage/busybox/bin
	cp "$bb" stage/busybox/bin/busybox
	for applet in $(stage/busybox/bin/busybox --list); do
		[ "$applet" = busybox ] || ln -sf busybox "stage/busybox/bin/$applet"
	done
}

stage_jq() {
	local jq lib
	jq=$(command -v jq) || die "jq not found (Debian/Ubuntu: apt-get install jq)"
	mkdir -p stage/jq/bin
	cp -L "$jq" stage/jq/bin/jq
	is_static "$jq" && return 0
	# Every library ldd lists, and the dynamic loader, at the same paths.
	for lib in $(ldd "$jq" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
		mkdir -p "stage/jq$(dirname "$lib")"
		cp -L "$lib" "stage/jq$lib"
	done
}

stage_yq() {
	local yq=${YQ:-}
	if [ -z "$yq" ]; then
		yq=$work/yq-$YQ_VERSION/yq
		if [ ! -x "$yq" ]; then
			command -v go >/dev/null || die "set YQ to a static yq v4 binary, or install Go to build one"
			echo "build.sh: building yq $YQ_VERSION with go install" >&2
			mkdir -p "$work/yq-$YQ_VERSION"
			GOBIN=$PWD/$work/yq-$YQ_VERSION CGO_ENABLED=0 GOFLAGS= GOWORK=off \
				go install -trimpath -ldflags='-s -w' "github.com/mikefarah/yq/v4@$YQ_VERSION"
		fi
	fi
	[ -x "$yq" ] || die "YQ=$yq is not an executable"
	is_static "$yq" || die "$yq is linked dynamically; the image needs a static yq"
	mkdir -p stage/yq/bin
	cp "$yq" stage/yq/bin/yq
}

builder=${BUILDER:-}
if [ -z "$builder" ]; then
	for b in buildah docker podman; do
		if command -v "$b" >/dev/null; then builder=$b; break; fi
	done
	[ -n "$builder" ] || die "no image builder found: install buildah, docker or podman (or set BUILDER)"
fi

rm -rf stage
mkdir -p stage "$work"
# The pieces named by COPY and ADD in every form a Dockerfile allows: lower
# case, flags (--chown), several sources, the JSON form, continued lines.
# A piece not staged would fail the build with a bare "no such file".
# Lines are continued as the builders' parser continues them: after a
# backslash that blanks or a CR (a Dockerfile saved on Windows) may
# follow, and over the comment and empty lines inside.
pieces=$(tr -d '\r' <Dockerfile | awk '
	/^[ \t]*$/ || /^[ \t]*#/ { next }
	{ line = cont ? line " " $0 : $0 }
	/\\[ \t]*$/ { sub(/\\[ \t]*$/, "", line); cont = 1; next }
	{ print line; cont = 0 }
	END { if (cont) print line }' |
	grep -iE '^[[:space:]]*(copy|add)[[:space:]]' |
	grep -oE '(^|[[:space:]"])(\./)?stage/[a-z0-9-]+' | sed 's|.*stage/||' | sort -u || true)
for piece in $pieces; do
	declare -F "stage_$piece" >/dev/null || die "the Dockerfile copies stage/$piece/, which this script does not stage"
	"stage_$piece"
done

rm -f "$out.new"
case $builder in
buildah)
	# A private store (vfs: works everywhere, also rootless) that is
	# emptied again: the tarball is the result.
	store=(--root "$PWD/$work/storage" --runroot "$PWD/$work/run" --storage-driver vfs)
	printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$work/policy.json"
	# A FROM image is pulled into the private store (it starts empty), under
	# the machine's signature policy when it has one, as podman pulls.
	pull_policy=(--signature-policy "$work/policy.json")
	# (containers/image reads $HOME/.config's, whatever XDG_CONFIG_HOME says.)
	if [ -e "${HOME:-}/.config/containers/policy.json" ] || [ -e /etc/containers/policy.json ]; then
		pull_policy=()
	fi
	mkdir -p "$work/tmp"
	export TMPDIR=$PWD/$work/tmp
	buildah "${store[@]}" bud --isolation chroot --timestamp 0 \
		${pull_policy[@]+"${pull_policy[@]}"} -t "$image" . >"$work/build.log" 2>&1 ||
		{ cat "$work/build.log" >&2; die "buildah bud failed"; }
	buildah "${store[@]}" push --signature-policy "$work/policy.json" "$image" "docker-archive:$out.new:$image" >>"$work/build.log" 2>&1 ||
		{ cat "$work/build.log" >&2; die "buildah push failed"; }
	buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
	;;
docker | podman)
	"$builder" build -t "$image" .
	"$builder" save -o "$out.new" "$image"
	;;
*) die "unknown BUILDER $builder (want buildah, docker or podman)" ;;
esac
mv -f "$out.new" "$out"
echo "build.sh: built $image into $out with $builder"
