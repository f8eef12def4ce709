#!/usr/bin/env bash
# `make run`: starts `ocifn serve` on the labelizer example function, sends it
# a sample RunFunctionRequest over gRPC, prints the response, and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

address=${ADDRESS:-127.0.0.1:9443}
ocifn=${OCIFN_BIN:-bin/ocifn}
tarball=testdata/build/labelizer.tar
request=testdata/functions/labelizer/request.json
log=$(mktemp)
cache=$(mktemp -d)
# Container ids are unprivileged on the host: they must be able to reach the
# unpacked image under the cache directory.
chmod 711 "$cache"
cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$log" "$cache"
}
trap cleanup EXIT

echo "==> ocifn serve --insecure --tarball $tarball --address $address"
"$ocifn" serve --insecure --tarball "$tarball" --address "$address" --metrics-address 127.0.0.1:0 --cache-dir "$cache" 2>"$log" &
pid=$!
# The address may be taken (an earlier run's server, someone else's): the
# call must not go to whatever listens there, so wait for this server's own
# "listening" line, and fail if it exits first.
for _ in $(seq 300); do
	grep -q 'msg=listening' "$log" && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "==> ocifn serve exited before it listened on $address; server log:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.1
done
grep -q 'msg=listening' "$log" || { echo "==> ocifn serve did not listen within 30s; server log:" >&2; cat "$log" >&2; exit 1; }
echo "==> request ($request):"
cat "$request"
echo "==> response:"
if ! go run ./hack/fncall -address "$address" "$request"; then
	echo "==> the call failed; server log:" >&2
	cat "$log" >&2
	exit 1
fi
echo "==> server log:"
cat "$log"
