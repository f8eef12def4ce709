#!/usr/bin/env bash
# Builds the test function images in testdata/functions/ with buildah, from
# their Dockerfiles, without pulling anything: every image is FROM scratch and
# copies pieces staged here from Debian packages (busybox-static, jq and its
# libraries), from the Go module proxy (yq, built static) and from this
# repository (the probe function's Go program and the KRM functions' Go
# programs, each in a module of its own, built static).
#
#   hack/testdata.sh [--check] [OUTDIR]        (OUTDIR defaults to testdata/build)
#
# Writes OUTDIR/<function>.tar (docker-archive, what `docker save` gives) for
# every testdata/functions/<function>/, plus OUTDIR/labelizer.oci.tar
# (oci-archive) and OUTDIR/labelizer.tgz (gzipped docker-archive), and
# OUTDIR/examples/<example>.tar for every examples/<example>/ that has a
# Dockerfile (the examples' Compositions name these files). An image is
# rebuilt only when a file of its directory (other than its requests and
# expectations, *.yaml and *.md files), a staged piece it copies or this
# script is newer than its tarball. Builds are reproducible: same inputs, same
# bytes (--timestamp 0).
#
# --check also runs every image for real: each layer of the tarball is unpacked
# into a rootfs and the image's Entrypoint+Cmd, Env and WorkingDir run in it
# (chroot with new mount, pid, net, ipc and uts namespaces, read-only root,
# tmpfs /tmp, /dev/null and /proc) on each request*.json of the function; the
# results must match the function's expectations:
#   expected<S>.json    stdout, compared after `jq -S -c` (and normalize.jq when
#                       the function has one); when absent, stdout must be empty
#   expected<S>.exit    exit status (default 0)
#   expected<S>.stderr  each line must occur in stderr
# where request<S>.json is the request (S is "" or e.g. "-error").
#
# Installs what it misses with apt-get when run as root (Debian 12); needs Go
# to build yq. Prints one line per image; buildah's output goes to
# OUTDIR/cache/logs/ and is printed only on failure.
set -euo pipefail
umask 022

YQ_VERSION=v4.44.3
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUNCTIONS=$REPO_ROOT/testdata/functions
SELF=$REPO_ROOT/hack/$(basename "${BASH_SOURCE[0]}")

die() { echo "testdata: $*" >&2; exit 1; }

check=0
out=
for arg; do
	case $arg in
	--check) check=1 ;;
	-h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$SELF"; exit 0 ;;
	-*) die "unknown flag $arg (usage: hack/testdata.sh [--check] [OUTDIR])" ;;
	*) [ -z "$out" ] || die "more than one OUTDIR"; out=$arg ;;
	esac
done
out=${out:-$REPO_ROOT/testdata/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=$out/cache
logs=$cache/logs
mkdir -p "$logs"

# One run at a time per OUTDIR (tests may call this concurrently).
exec 9>"$out/.lock"
flock 9

# ---------------------------------------------------------------- packages
ensure_packages() {
	local missing=() p
	for p in buildah busybox-static jq; do
		# Installed, not only known: a removed package keeps its config files
		# and a "deinstall" status that dpkg -s still reports with success.
		[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]} (run as root, or apt-get install -y ${missing[*]})"
	local log=$logs/apt.log
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; } >"$log" 2>&1 </dev/null; then
		cat "$log" >&2
		die "apt-get install ${missing[*]} failed"
	fi
	echo "testdata: installed ${missing[*]}"
}
ensure_packages
command -v go >/dev/null || die "go is needed to build yq $YQ_VERSION (static) for the yq-function image"

# ---------------------------------------------------------------- staging
# Each piece lives in $cache/stage/<piece>/ (a tree copied to / of an image) and
# has a stamp $cache/stage/<piece>.stamp touched when it was (re)made; images
# depend on the stamps of the pieces they copy.
stage=$cache/stage
mkdir -p "$stage"

# fresh PIECE [SOURCE...]: true if the piece is staged and newer than this
# script and every SOURCE file.
fresh() {
	local stamp=$stage/$1.stamp
	shift
	[ -f "$stamp" ] && [ -d "${stamp%.stamp}" ] || return 1
	[ -z "$(find "$SELF" "$@" -newer "$stamp" -print -quit 2>/dev/null)" ]
}

# finish PIECE: move the tree built in <piece>.new into place and stamp it.
finish() {
	rm -rf "${stage:?}/$1"
	mv "$stage/$1.new" "$stage/$1"
	touch "$stage/$1.stamp"
}

stage_base() {
	fresh base && return 0
	local d=$stage/base.new
	rm -rf "$d"
	mkdir -p "$d"/{bin,etc,dev,proc,sys,tmp}
	chmod 1777 "$d/tmp"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$d/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
	finish base
}

stage_busybox() {
	local bb
	bb=$(dpkg -L busybox-static | grep -m1 '/bin/busybox$') || die "busybox-static has no /bin/busybox"
	fresh busybox "$bb" && return 0
	local d=$stage/busybox.new applet
	rm -rf "$d"
	mkdir -p "$d/bin"
	cp "$bb" "$d/bin/busybox"
	chmod 0755 "$d/bin/busybox"
	for applet in $("$bb" --list); do
		[ "$applet" = busybox ] || ln -s busybox "$d/bin/$applet"
	done
	[ -L "$d/bin/sh" ] || die "busybox has no sh applet"
	finish busybox
}

stage_jq() {
	local jq=/usr/bin/jq
	[ -x "$jq" ] || die "$jq not found (Debian package jq)"
	# Every library ldd names, and the loader, at the path ldd gives.
	local libs
	libs=$(ldd "$jq" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
	# shellcheck disable=SC2086 # one path a word
	fresh jq "$jq" $(readlink -f $libs) && return 0
	local d=$stage/jq.new lib
	rm -rf "$d"
	mkdir -p "$d/bin"
	cp -L "$jq" "$d/bin/jq"
	for lib in $libs; do
		mkdir -p "$d$(dirname "$lib")"
		cp -L "$lib" "$d$lib"
	done
	[ -e "$d/lib64/ld-linux-x86-64.so.2" ] || die "jq's loader was not staged (ldd $jq)"
	finish jq
}

stage_yq() {
	local stamp=$stage/yq.stamp
	if fresh yq && [ "$(cat "$stamp")" = "$YQ_VERSION" ]; then
		return 0
	fi
	local d=$stage/yq.new log=$logs/yq.log start=$EPOCHREALTIME
	rm -rf "$d"
	mkdir -p "$d/bin"
	if ! (cd "$stage" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$d/bin" \
		go install -trimpath -ldflags='-s -w' "github.com/mikefarah/yq/v4@$YQ_VERSION") >"$log" 2>&1; then
		cat "$log" >&2
		die "building yq $YQ_VERSION failed"
	fi
	[ "$("$d/bin/yq" --version | awk '{ print $NF }')" = "$YQ_VERSION" ] || die "the built yq is not $YQ_VERSION"
	rm -rf "${stage:?}/yq"
	mv "$d" "$stage/yq"
	echo "$YQ_VERSION" >"$stamp"
	awk -v v="$YQ_VERSION" -v a="$start" -v b="$EPOCHREALTIME" \
		'BEGIN { printf "testdata: staged yq %s, built static (%.1fs)\n", v, b - a }'
}

# The probe function's program: static Go, built from the function's
# directory (testdata/functions/probe/probe.go).
stage_probe() {
	local src=$FUNCTIONS/probe
	# shellcheck disable=SC2046 # one path a word
	fresh probe $(find "$src" -name '*.go') "$REPO_ROOT/go.mod" && return 0
	local d=$stage/probe.new log=$logs/probe.log
	rm -rf "$d"
	mkdir -p "$d/bin"
	if ! (cd "$REPO_ROOT" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
		go build -trimpath -ldflags='-s -w' -o "$d/bin/probe" ./testdata/functions/probe) >"$log" 2>&1; then
		cat "$log" >&2
		die "building the probe failed"
	fi
	finish probe
}

# A KRM function's program: static Go in a module of its own
# (testdata/functions/NAME/go.mod, which requires kyaml), so that kyaml's
# fn/framework stays out of ocifn's go.mod. Its modules come from the Go
# module proxy, as yq's do.
stage_krm() {
	local name=$1 src=$FUNCTIONS/$1
	# shellcheck disable=SC2046 # one path a word
	fresh "$name" $(find "$src" -name '*.go' -o -name 'go.mod' -o -name 'go.sum') && return 0
	local d=$stage/$name.new log=$logs/$name.log
	rm -rf "$d"
	mkdir -p "$d/bin"
	if ! (cd "$src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
		go build -trimpath -ldflags='-s -w' -o "$d/bin/$name" .) >"$log" 2>&1; then
		cat "$log" >&2
		die "building $name failed"
	fi
	finish "$name"
}

stage_base
stage_busybox
stage_jq
stage_yq
stage_probe
stage_krm krm-labels
stage_krm krm-validate

# ---------------------------------------------------------------- images
# A private store: nothing read from or written to the host's containers
# storage or /var/tmp.
export CONTAINERS_STORAGE_CONF=$cache/storage.conf
cat >"$CONTAINERS_STORAGE_CONF" <<EOF
[storage]
driver = "vfs"
graphroot = "$cache/storage"
runroot = "$cache/run"
EOF
# Nothing is pulled or verified (FROM scratch); this keeps a strict host
# policy.json from getting in the way.
printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$cache/policy.json"
export TMPDIR=$cache/tmp
mkdir -p "$TMPDIR"
buildah=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs)

# pieces_of DOCKERFILE: the staged pieces a Dockerfile copies (COPY stage/X/).
pieces_of() { grep -oE '^COPY[[:space:]]+stage/[a-z0-9-]+' "$1" | sed 's|.*stage/||' | sort -u; }

# build NAME: (re)build OUTDIR/NAME.tar when out of date; prints one line.
build() {
	local name=$1 dir=${2:-$FUNCTIONS/$1} tar=${3:-$out/$1.tar}
	local log=$logs/$name.log ctx=$cache/ctx/$name
	local pieces=() stamps=() p start
	mapfile -t pieces < <(pieces_of "$dir/Dockerfile")
	for p in "${pieces[@]}"; do
		[ -d "$stage/$p" ] || die "$name/Dockerfile copies stage/$p/, which this script does not stage"
		stamps+=("$stage/$p.stamp")
	done
	local extra=()
	[ "$name" = labelizer ] && extra=("$out/labelizer.oci.tar" "$out/labelizer.tgz")
	# Inputs: the function's files (not its requests and expectations, which
	# only --check reads), this script and the pieces the Dockerfile copies.
	if [ -f "$tar" ] && [ -z "$(find "$dir" "$SELF" "${stamps[@]}" -newer "$tar" \
		! -name 'request*' ! -name 'expected*' ! -name normalize.jq ! -name '*.yaml' ! -name '*.md' -print -quit)" ]; then
		local e ok=1
		for e in "${extra[@]}"; do [ -f "$e" ] && ! [ "$e" -ot "$tar" ] || ok=0; done
		if [ $ok = 1 ]; then
			echo "$name: up to date ($tar)"
			return 0
		fi
	fi
	start=$EPOCHREALTIME
	built=1

	# Build context: the function's directory plus hard links to the pieces.
	rm -rf "$ctx"
	mkdir -p "$ctx/stage"
	cp -a "$dir/." "$ctx/"
	chmod -R u+rwX,go+rX,go-w "$ctx"  # the same modes whatever the checkout's umask
	for p in "${pieces[@]}"; do cp -al "$stage/$p" "$ctx/stage/$p"; done

	# --layers: one layer per COPY, as `docker build` makes; no -t: the image
	# is pushed by id, so the archive names only NAME:latest.
	local iid=$cache/$name.iid
	rm -f "$iid" "$tar.new" "$out/labelizer.oci.tar.new"
	if ! {
		"${buildah[@]}" bud --isolation chroot --format oci --layers --timestamp 0 \
			--identity-label=false --pull-never --signature-policy "$cache/policy.json" --iidfile "$iid" -f "$ctx/Dockerfile" "$ctx" &&
			"${buildah[@]}" push --signature-policy "$cache/policy.json" "$(cat "$iid")" "docker-archive:$tar.new:$name:latest" &&
			if [ "$name" = labelizer ]; then
				# oci-archive, tarred here so that it is reproducible too.
				rm -rf "$cache/oci-layout" &&
					"${buildah[@]}" push --signature-policy "$cache/policy.json" "$(cat "$iid")" "oci:$cache/oci-layout:$name:latest" &&
					tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
						-C "$cache/oci-layout" -cf "$out/labelizer.oci.tar.new" oci-layout index.json blobs &&
					rm -rf "$cache/oci-layout" &&
					gzip -n -c "$tar.new" >"$out/labelizer.tgz.new" &&
					mv -f "$out/labelizer.oci.tar.new" "$out/labelizer.oci.tar" &&
					mv -f "$out/labelizer.tgz.new" "$out/labelizer.tgz"
			fi
	} >"$log" 2>&1 </dev/null; then
		cat "$log" >&2
		die "$name: build failed (log: $log)"
	fi
	mv -f "$tar.new" "$tar"
	# The tarball is the newest output: the extra formats count as current.
	[ "$name" != labelizer ] || touch -r "$tar" "$out/labelizer.oci.tar" "$out/labelizer.tgz"
	rm -rf "$ctx" "$iid"
	awk -v n="$name" -v t="$tar" -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%s: built %s (%.1fs)\n", n, t, b - a }'
}

names=()
for d in "$FUNCTIONS"/*/; do
	[ -f "$d/Dockerfile" ] && names+=("$(basename "$d")")
done
[ ${#names[@]} -gt 0 ] || die "no functions in $FUNCTIONS"
# The tarballs are the cache: once a run built something, drop the images
# (and --layers' intermediate images, which sped the run up) from the private
# store, also when a build failed.
built=0
drop_images() {
	[ $built = 1 ] || return 0
	"${buildah[@]}" rmi --all --force >"$logs/rmi.log" 2>&1 </dev/null ||
		echo "testdata: warning: buildah rmi --all failed, see $logs/rmi.log" >&2
	built=0
}
trap drop_images EXIT
for name in "${names[@]}"; do build "$name"; done
# The examples' function images: OUTDIR/examples/<example>.tar.
mkdir -p "$out/examples"
for d in "$REPO_ROOT"/examples/*/; do
	[ -f "$d/Dockerfile" ] || continue
	build "example-$(basename "$d")" "${d%/}" "$out/examples/$(basename "$d").tar"
done
drop_images

[ $check = 1 ] || exit 0

# ---------------------------------------------------------------- check
[ "$(id -u)" = 0 ] || die "--check needs root (it mounts and chroots)"
UNSHARE=$(command -v unshare)

# run_image ROOTFS CONFIG: runs the image's process with stdin/stdout/stderr
# inherited; returns its exit status.
run_image() {
	local rootfs=$1 config=$2 envs argv wd
	eval "envs=($(jq -r '.config.Env // [] | @sh' "$config"))"
	eval "argv=($(jq -r '(.config.Entrypoint // []) + (.config.Cmd // []) | @sh' "$config"))"
	wd=$(jq -r '.config.WorkingDir // "" | if . == "" then "/" else . end' "$config")
	[ ${#argv[@]} -gt 0 ] || { echo "the image has neither Entrypoint nor Cmd" >&2; return 126; }
	# Outer: a private mount namespace that makes the rootfs read-only and
	# adds /tmp and /dev/null. Inner: only the image Env, then new pid, net,
	# ipc and uts namespaces, chroot, the WorkingDir, a fresh /proc.
	timeout 60 "$UNSHARE" --mount --propagation private -- /bin/sh -ec '
		r=$1; shift
		mount --bind "$r" "$r"
		mount -o remount,bind,ro "$r"
		[ ! -d "$r/tmp" ] || mount -t tmpfs -o mode=1777,size=16m tmpfs "$r/tmp"
		if [ -d "$r/dev" ]; then
			mount -t tmpfs -o mode=755,size=64k tmpfs "$r/dev"
			: >"$r/dev/null"
			mount --bind /dev/null "$r/dev/null"
		fi
		exec "$@"' sh "$rootfs" \
		env -i "${envs[@]}" "$UNSHARE" --pid --net --ipc --uts --fork --mount-proc \
		--root="$rootfs" --wd="$wd" -- "${argv[@]}"
}

# check NAME: unpacks OUTDIR/NAME.tar and runs every request of the function.
check() {
	local name=$1 dir=$FUNCTIONS/$1 work=$cache/check/$1
	rm -rf "$work"
	mkdir -p "$work/image" "$work/rootfs"
	tar -xf "$out/$name.tar" -C "$work/image"
	local config layer
	config=$work/image/$(jq -r '.[0].Config' "$work/image/manifest.json")
	while read -r layer; do
		if tar -tf "$work/image/$layer" | grep -q '\.wh\.'; then
			echo "$name: layer $layer has whiteouts, which this check does not apply" >&2
			return 1
		fi
		tar -xf "$work/image/$layer" -C "$work/rootfs" --same-owner --same-permissions
	done < <(jq -r '.[0].Layers[]' "$work/image/manifest.json")

	local req suffix want_json want_exit want_err rc failed=0 cases=0 norm line
	for req in "$dir"/request*.json; do
		[ -e "$req" ] || continue
		cases=$((cases + 1))
		suffix=$(basename "$req" .json)
		suffix=${suffix#request}
		want_json=$dir/expected$suffix.json
		want_exit=0
		[ ! -f "$dir/expected$suffix.exit" ] || want_exit=$(tr -d ' \n' <"$dir/expected$suffix.exit")
		want_err=$dir/expected$suffix.stderr
		rc=0
		run_image "$work/rootfs" "$config" <"$req" >"$work/stdout" 2>"$work/stderr" || rc=$?
		local why=()
		[ "$rc" = "$want_exit" ] || why+=("exit status $rc, want $want_exit")
		if [ -f "$want_json" ]; then
			norm=.
			[ ! -f "$dir/normalize.jq" ] || norm=$(cat "$dir/normalize.jq")
			if ! jq -S -c "$norm" "$want_json" >"$work/want" 2>&1; then
				why+=("$want_json: $(cat "$work/want")")
			elif ! jq -S -c "$norm" "$work/stdout" >"$work/got" 2>"$work/got.err"; then
				why+=("stdout is not JSON: $(head -c 300 "$work/stdout")")
			elif ! cmp -s "$work/want" "$work/got"; then
				why+=("stdout differs from $(basename "$want_json"):
  want $(cat "$work/want")
  got  $(cat "$work/got")")
			fi
		elif [ -s "$work/stdout" ]; then
			why+=("stdout should be empty, got: $(head -c 300 "$work/stdout")")
		fi
		if [ -f "$want_err" ]; then
			while IFS= read -r line; do
				[ -z "$line" ] || grep -qF -- "$line" "$work/stderr" || why+=("stderr lacks: $line")
			done <"$want_err"
		fi
		if [ ${#why[@]} -gt 0 ]; then
			failed=1
			echo "$name: check FAILED for $(basename "$req"):" >&2
			printf '  %s\n' "${why[@]}" >&2
			echo "  stderr:" >&2
			sed 's/^/    /' "$work/stderr" >&2
		fi
	done
	if [ $failed = 0 ]; then
		rm -rf "$work"
		echo "$name: check ok ($cases requests)"
	fi
	return $failed
}

status=0
for name in "${names[@]}"; do check "$name" || status=1; done

# The other formats of labelizer hold the same image: the .tgz is the docker
# archive gzipped; the oci-archive has the same config and layer diff ids.
check_formats() {
	local work=$cache/check/labelizer-formats got want
	gzip -dc "$out/labelizer.tgz" | cmp -s - "$out/labelizer.tar" ||
		{ echo "labelizer.tgz is not labelizer.tar gzipped" >&2; return 1; }
	rm -rf "$work"
	mkdir -p "$work/docker" "$work/oci"
	tar -xf "$out/labelizer.tar" -C "$work/docker"
	tar -xf "$out/labelizer.oci.tar" -C "$work/oci"
	want=$(jq -S -c '{config, rootfs}' "$work/docker/$(jq -r '.[0].Config' "$work/docker/manifest.json")")
	local m
	m=$work/oci/blobs/$(jq -r '.manifests[0].digest | sub(":"; "/")' "$work/oci/index.json")
	got=$(jq -S -c '{config, rootfs}' "$work/oci/blobs/$(jq -r '.config.digest | sub(":"; "/")' "$m")")
	[ "$got" = "$want" ] ||
		{ printf 'labelizer.oci.tar differs from labelizer.tar:\n  oci    %s\n  docker %s\n' "$got" "$want" >&2; return 1; }
	[ "$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$work/oci/index.json")" = labelizer:latest ] ||
		{ echo "labelizer.oci.tar: index.json does not name labelizer:latest" >&2; return 1; }
	rm -rf "$work"
	echo "labelizer: check ok (labelizer.tgz, labelizer.oci.tar hold the same image)"
}
check_formats || status=1
rmdir "$cache/check" 2>/dev/null || true
exit $status
