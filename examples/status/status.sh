#!/bin/sh
# function-status: set the XR's status from the observed composed resources.
#
# A desired composed resource is ready when the observed one has the condition
# Ready=True. The XR's status lists every composed resource with its external
# name and readiness (status.resources) and counts the ready ones; the
# condition ResourcesReady says whether all are. Resources that are not ready
# yet are logged on stderr, which `ocifn render` and `ocifn test` show.
set -eu

req=$(cat)

printf '%s' "$req" | jq -r '
	.observed.resources | to_entries[]
	| (.value.resource.status.conditions // [] | map(select(.type == "Ready")) | first // {}) as $ready
	| select($ready.status != "True")
	| "\(.key) is not ready yet: \($ready.reason // "no Ready condition")"' >&2

printf '%s' "$req" | jq -c -f status.jq
