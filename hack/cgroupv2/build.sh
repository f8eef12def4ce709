#!/usr/bin/env bash
# Builds the pure cgroup v2 test guest from Debian packages only, cached and
# idempotent under OUT (default build/cgroupv2):
#
#   OUT/vmlinuz      the kernel of Debian's linux-image-amd64 (dpkg-deb -x,
#                    nothing is installed on the host)
#   OUT/initrd.gz    busybox plus the modules Debian builds as modules and
#                    the guest needs to reach its root: virtio, ext4, 9p
#   OUT/rootfs.ext4  debootstrap --variant=minbase bookworm with crun,
#                    busybox-static, jq and docker-registry, and the init
#                    (hack/cgroupv2/init) that mounts cgroup2 alone
#
#   hack/cgroupv2/build.sh [OUT]
#
# Each piece is rebuilt only when missing or when this script or the init
# changed (a stamp holds their checksum). Needs root, debootstrap, cpio,
# e2fsprogs and busybox-static on the host (hack/deps.sh installs them).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../build/cgroupv2}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The guest's packages come from the mirror the host's apt uses (its first
# Debian source), unless DEBIAN_MIRROR names another.
# shellcheck source=hack/lib.sh
. "$here/../lib.sh"
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
[ -n "$mirror" ] || { echo "cgroupv2: no Debian mirror in the host's apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
suite=bookworm
packages=crun,busybox-static,jq,docker-registry,ca-certificates

log() { echo "cgroupv2: $*" >&2; }

# The checksum of what decides a piece: this script and the guest's init.
sum=$(cat "$here/build.sh" "$here/init" | sha256sum | cut -c1-16)
fresh() { [ -e "$out/$1" ] && [ "$(cat "$out/$1.stamp" 2>/dev/null)" = "$sum" ]; }
stamp() { echo "$sum" >"$out/$1.stamp"; }

# The kernel and its modules, from the .deb linux-image-amd64 depends on.
if ! fresh kernel; then
	log "fetching the kernel (linux-image-amd64)"
	rm -rf "$out/kernel" "$out/debs"
	mkdir -p "$out/debs" "$out/kernel"
	chmod 777 "$out/debs" # apt downloads as _apt
	pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$pkg" ] || { log "apt-cache knows no linux-image-amd64 (run apt-get update)"; exit 1; }
	(cd "$out/debs" && apt-get download "$pkg" </dev/null >/dev/null)
	dpkg-deb -x "$out"/debs/"$pkg"_*.deb "$out/kernel"
	# The .deb leaves modules.dep to the installer.
	/sbin/depmod -b "$out/kernel" "$(ls "$out/kernel/lib/modules")"
	rm -rf "$out/debs"
	stamp kernel
fi
kver=$(ls "$out/kernel/lib/modules" | head -n1)
cp "$out/kernel/boot/vmlinuz-$kver" "$out/vmlinuz"

# The initramfs: load the modules (dependencies first, from modules.dep),
# mount the root disk, switch to it.
if ! fresh initrd.gz; then
	log "building the initramfs (kernel $kver)"
	moddir=$out/kernel/lib/modules/$kver
	ird=$(mktemp -d)
	trap 'rm -rf "$ird"' EXIT
	mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
	cp /bin/busybox "$ird/bin/busybox"
	file "$ird/bin/busybox" 2>/dev/null | grep -q static || cp "$(dpkg -L busybox-static | grep '/bin/busybox$')" "$ird/bin/busybox"
	declare -A seen=()
	order=()
	add() { # add MODULE-PATH (relative to moddir) after its dependencies
		local m=$1 deps d
		[ -n "${seen[$m]:-}" ] && return
		seen[$m]=1
		deps=$(awk -v m="$m:" '$1 == m { $1 = ""; print }' "$moddir/modules.dep")
		for d in $deps; do add "$d"; done
		order+=("$m")
	}
	# crc32c_generic is a soft dependency of ext4, which modules.dep omits.
	for name in virtio_pci virtio_blk crc32c_generic ext4 9p 9pnet_virtio; do
		m=$(awk -F: -v n="/$name.ko" 'index($1, n) && substr($1, length($1) - length(n) + 1) == n {print $1; exit}' "$moddir/modules.dep")
		# Built into the kernel when modules.builtin names it.
		[ -z "$m" ] && grep -q "/$name.ko\$" "$moddir/modules.builtin" && continue
		[ -n "$m" ] || { log "no module $name in $moddir"; exit 1; }
		add "$m"
	done
	: >"$ird/modules"
	for m in "${order[@]}"; do
		base=$(basename "$m")
		cp "$moddir/$m" "$ird/lib/modules/$base"
		case $base in *.xz) xz -d "$ird/lib/modules/$base"; base=${base%.xz} ;; esac
		echo "$base" >>"$ird/modules"
	done
	cat >"$ird/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules); do insmod /lib/modules/$m || echo "initramfs: insmod $m failed"; done
for i in $(seq 100); do [ -b /dev/vda ] && break; sleep 0.1; done
mount -t ext4 /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/ocifn-guest-init
INIT
	chmod 755 "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initrd.gz.tmp"
	mv "$out/initrd.gz.tmp" "$out/initrd.gz"
	rm -rf "$ird"
	trap - EXIT
	stamp initrd.gz
fi

# The root filesystem.
if ! fresh rootfs.ext4; then
	log "debootstrap $suite (minbase + $packages)"
	rm -rf "$out/rootfs" "$out/rootfs.ext4"
	debootstrap --variant=minbase --include="$packages" "$suite" "$out/rootfs" "$mirror" </dev/null >"$out/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$out/debootstrap.log" >&2; log "debootstrap failed (log: $out/debootstrap.log)"; exit 1; }
	install -m 755 "$here/init" "$out/rootfs/sbin/ocifn-guest-init"
	mkdir -p "$out/rootfs/repo" "$out/rootfs/job"
	echo guest >"$out/rootfs/etc/hostname"
	# The unprivileged user the limits tests delegate a cgroup to.
	chroot "$out/rootfs" useradd --uid 1000 --create-home --shell /bin/sh ocifn-user
	rm -rf "$out/rootfs/var/cache/apt/archives"/*.deb "$out/rootfs/var/lib/apt/lists"/*
	size=$(($(du -sm "$out/rootfs" | cut -f1) + 3072))
	mkfs.ext4 -q -L ocifn-guest -d "$out/rootfs" "$out/rootfs.ext4.tmp" "${size}M"
	mv "$out/rootfs.ext4.tmp" "$out/rootfs.ext4"
	rm -rf "$out/rootfs"
	stamp rootfs.ext4
fi
log "guest ready in $out"
