# Shell functions the hack/ scripts share; sourced, not run.

# host_mirror [ROOT] prints the Debian mirror the host's apt uses: its first
# Debian source that is not a security or updates suite (nothing if there is
# none). On a host that is not Debian it prints nothing: the first source of
# an Ubuntu host is Ubuntu's archive, which has no Debian suite, and the
# scripts would fetch bookworm from it. ROOT (default /) is where etc/ is.
host_mirror() {
	local root=${1:-}
	grep -qE '^ID="?debian"?$' "$root/etc/os-release" 2>/dev/null || return 0
	{
		awk '/^URIs:/ { print $2 }' "$root"/etc/apt/sources.list.d/*.sources 2>/dev/null
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
			"$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*.list 2>/dev/null
	} | grep -v -e '-security' -e '-updates' | head -n 1 || true # a missing sources file is no error
}
