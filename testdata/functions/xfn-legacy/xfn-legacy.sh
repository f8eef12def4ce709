#!/bin/sh
# xfn-legacy: a container function for Crossplane 1.13's xfn (alpha). Reads
# a FunctionIO YAML document on stdin, prints it back on stdout with the
# resources of its config composed. A yq error: yq's message, exit 1.
exec yq -P -p yaml -o yaml --from-file /fn/xfn-legacy.yq -
