#!/usr/bin/env bash
# Installs the Debian packages ocifn's build, tests and examples need, if any
# is missing. Safe to run again; prints nothing when all are present.
#
#   hack/deps.sh [PACKAGE...]     (default: the packages below)
set -euo pipefail

packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(crun buildah busybox-static jq skopeo docker-registry seccomp build-essential)

missing=()
for p in "${packages[@]}"; do
	# Installed, not only known: a removed package keeps its config files
	# and a "deinstall" status that dpkg -s still reports with success.
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { echo "deps: missing Debian packages: ${missing[*]}; install them as root" >&2; exit 1; }
	sudo=sudo
fi
echo "deps: installing ${missing[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update &&
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 </dev/null; then
	cat "$log" >&2
	echo "deps: apt-get install ${missing[*]} failed" >&2
	exit 1
fi
