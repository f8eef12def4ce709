#!/bin/sh
# jq-function: runs the jq program found in the request's .input.filter on the
# whole request and prints its output (compact) as the response.
# No filter: a message on stderr and exit 1. A jq error: jq's own message on
# stderr and jq's exit status (3 for a compile error, 5 for a runtime error).
set -u
req=$(cat) || exit 1
filter=$(printf '%s' "$req" | jq -r '.input.filter // empty | strings') || {
	echo "jq-function: the request on stdin is not JSON" >&2
	exit 1
}
if [ -z "$filter" ]; then
	echo "jq-function: no filter: set .input.filter to a jq program in the pipeline step's input" >&2
	exit 1
fi
printf '%s' "$req" | jq -c "$filter"
