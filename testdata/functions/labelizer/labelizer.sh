#!/bin/sh
# labelizer: reads a RunFunctionRequest (protojson) on stdin and prints a
# RunFunctionResponse with the label ocifn.dev/labelized=$LABEL_VALUE added to
# every desired composed resource. LABEL_VALUE comes from the image Env; the jq
# program is read relative to the image WorkingDir.
set -eu
: "${LABEL_VALUE:?is not set: the image Env did not reach the process}"
if [ ! -r labelizer.jq ]; then
	echo "labelizer: ./labelizer.jq not found in $(pwd): the image WorkingDir (/fn) was not applied" >&2
	exit 1
fi
exec jq -c --arg value "$LABEL_VALUE" -f labelizer.jq
