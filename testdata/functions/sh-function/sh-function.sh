#!/bin/sh
# sh-function: runs .input.script of the request with /bin/sh; the script
# gets the whole request on stdin and its stdout is the response.
set -u
req=$(cat) || exit 1
script=$(printf '%s' "$req" | jq -r '.input.script // empty | strings') || {
	echo "sh-function: the request on stdin is not JSON" >&2
	exit 1
}
if [ -z "$script" ]; then
	echo "sh-function: no script: set .input.script in the pipeline step's input" >&2
	exit 1
fi
printf '%s' "$req" | exec /bin/sh -c "$script"
