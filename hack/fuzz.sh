#!/usr/bin/env bash
# Runs every fuzz target of ocifn for a bounded time each (FUZZTIME, default
# 10s; `make fuzz FUZZTIME=5m` for a longer run). Seeds live in each
# package's testdata/fuzz/<Target>/; an input that fails is written there by
# `go test` and this script fails: fix the bug and keep the file as a
# regression seed (plain `go test` runs every seed).
#
#   hack/fuzz.sh [PACKAGE:TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:--mod=mod}
FUZZTIME=${FUZZTIME:-10s}
# Minimizing a new input is capped too: go test's default (60s) would spend a
# short run minimizing its first finding instead of fuzzing.
# `make test`'s 10 s runs set 0s: on a fresh machine, with no corpus in Go's
# cache yet, nearly every early input is new and minimizing each one left
# FuzzUnpack under 10 executions a second instead of thousands.
export FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-2s}

# FuzzOpen and FuzzUnpack write every input to files in temp directories:
# on a busy disk they wait on it more than they compute (FuzzUnpack: 10 ms
# an input on disk, 1.3 ms on tmpfs). Give them a tmpfs when there is one.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	fuzztmp=$(mktemp -d /dev/shm/ocifn-fuzz-XXXXXX)
	trap 'rm -rf "$fuzztmp"' EXIT
	export TMPDIR=$fuzztmp
fi

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(
	./codec:FuzzJSONEncode
	./codec:FuzzJSONDecode
	./codec:FuzzFunctionIODecode
	./codec:FuzzFunctionIORoundTrip
	./codec:FuzzKRMDecode
	./codec:FuzzKRMRoundTrip
	./adaptor:FuzzContract
	./internal/fieldpath:FuzzFieldPath
	./oci:FuzzOpen
	./oci:FuzzUnpack
)
for t in "${targets[@]}"; do
	pkg=${t%%:*} name=${t#*:}
	echo "fuzz: $pkg $name for $FUZZTIME"
	corpus=$pkg/testdata/fuzz/$name
	before=$(ls "$corpus" 2>/dev/null || true)
	if ! out=$(go test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "${FUZZMINIMIZETIME:-2s}" "$pkg" 2>&1); then
		# Go 1.26's fuzz coordinator can report the end of -fuzztime itself
		# as a failure, "context deadline exceeded", when a worker is
		# mid-input at the deadline (golang/go#75804, fixed in Go 1.27).
		# That is no finding: none was written, and replaying every seed
		# and the corpus without fuzzing passes.
		if [ "$(echo "$out" | grep -v '^fuzz: elapsed' | grep -cx '    context deadline exceeded')" = 1 ] &&
			! echo "$out" | grep -q 'Failing input written' &&
			[ "$(ls "$corpus" 2>/dev/null || true)" = "$before" ] &&
			replay=$(go test -count=1 -run "^$name\$" "$pkg" 2>&1); then
			echo "fuzz: $pkg $name: stopped by Go's fuzztime deadline race (golang/go#75804), no failing input; seeds and corpus replayed clean"
		else
			echo "$out" >&2
			[ -z "${replay:-}" ] || echo "$replay" >&2
			echo "fuzz: $pkg $name FAILED; the failing input is in $corpus/" >&2
			exit 1
		fi
	fi
	# The last progress line: "fuzz: elapsed: 1m3s, execs: 12345 (1234/sec), ...".
	# Its rate covers the last interval only; the average is over the run.
	# grep finds nothing when the run ended while Go still replayed the
	# cached corpus ("gathering baseline coverage"): under pipefail that
	# must not end the script without a word.
	last=$(echo "$out" | grep -E '^fuzz: elapsed: [0-9hms]+, execs: [0-9]+' | tail -1 || true)
	if [ -z "$last" ]; then
		if baseline=$(echo "$out" | grep -E '^fuzz: elapsed: .*gathering baseline coverage' | tail -1) && [ -n "$baseline" ]; then
			echo "fuzz: $pkg $name: the run only replayed the cached corpus (${baseline#fuzz: }); no new inputs were tried; the ones it replayed passed"
			continue
		fi
		echo "$out" >&2
		echo "fuzz: $pkg $name printed no progress line" >&2
		exit 1
	fi
	echo "$last" | awk -v target="$pkg $name" '{
		d = $3; sub(/,$/, "", d); secs = 0
		if (match(d, /[0-9]+h/)) secs += 3600 * substr(d, RSTART, RLENGTH - 1)
		if (match(d, /[0-9]+m/)) secs += 60 * substr(d, RSTART, RLENGTH - 1)
		if (match(d, /[0-9]+s/)) secs += substr(d, RSTART, RLENGTH - 1)
		execs = $5
		printf "fuzz: %s: %d execs in %ds, %d execs/sec\n", target, execs, secs, execs / (secs > 0 ? secs : 1)
	}'
done
