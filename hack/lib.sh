# Shell functions the hack/ scripts share; sourced, not run.

# host_mirror prints the Debian mirror the host's apt uses: its first Debian
# source that is not a security or updates suite (nothing if there is none).
host_mirror() {
	{
		awk '/^URIs:/ { print $2 }' /etc/apt/sources.list.d/*.sources 2>/dev/null
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
	} | grep -v -e '-security' -e '-updates' | head -n 1 || true # a missing sources file is no error
}
