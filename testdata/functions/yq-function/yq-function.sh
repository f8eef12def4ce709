#!/bin/sh
# yq-function: runs the yq expression found in the request's .input.expression
# on the whole request (yq -p json -o json -I0) and prints the result as the
# response. No expression: a message on stderr and exit 1. A yq error: yq's own
# message on stderr and its exit status (1).
set -u
req=$(cat) || exit 1
expr=$(printf '%s' "$req" | yq -p json -o json -r '.input.expression // "" | select(tag == "!!str")' -) || {
	echo "yq-function: the request on stdin is not JSON" >&2
	exit 1
}
if [ -z "$expr" ]; then
	echo "yq-function: no expression: set .input.expression to a yq expression in the pipeline step's input" >&2
	exit 1
fi
printf '%s' "$req" | yq -p json -o json -I0 "$expr" -
