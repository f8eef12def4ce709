#!/bin/sh
# failing: fails on purpose, without reading the request on stdin and without
# printing anything on stdout. The last stderr line is the reason.
echo "failing: starting; the request on stdin is not read" >&2
echo "failing: about to exit with status 1" >&2
echo "boom: the function failed on purpose" >&2
exit 1
