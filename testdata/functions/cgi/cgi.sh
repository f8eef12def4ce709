#!/bin/sh
# A CGI program: the request in the environment and on stdin, the response
# (an optional header block, then the body) on stdout.
case "$PATH_INFO" in
/env)
	printf 'Content-Type: text/plain\nX-Request-Method: %s\n\n' "$REQUEST_METHOD"
	env | grep -E '^(REQUEST_METHOD|PATH_INFO|QUERY_STRING|CONTENT_TYPE|CONTENT_LENGTH|SERVER_PROTOCOL|HTTP_|EVENT_|GATEWAY_INTERFACE)' | sort
	echo "---"
	cat
	;;
/status)
	printf 'Status: 418 I am a teapot\nContent-Type: application/json\n\n{"tea": true}'
	;;
/plain)
	echo "no header block, just a body"
	;;
/yaml)
	# Looks like headers, but holds no CGI field: all body.
	printf 'apiVersion: v1\nkind: ConfigMap\n\ndata: {}\n'
	;;
/status-yaml)
	# YAML whose first key is a CGI field's name in lower case, with a
	# value no CGI program writes: all body.
	printf 'status: ok\nitems: []\n'
	;;
/fail)
	echo "about to fail" >&2
	echo "oops: the thing broke" >&2
	exit 3
	;;
/fail-long)
	# More lines than a call's stderr logs (1,024), then a failure.
	i=1
	while [ $i -le 1100 ]; do echo "stderr line $i" >&2; i=$((i+1)); done
	exit 4
	;;
/sleep)
	sleep "${QUERY_STRING:-60}"
	printf 'Content-Type: text/plain\n\nslept %s\n' "$QUERY_STRING"
	;;
/output)
	# The request's body is the program's output, as it is.
	cat
	;;
/bad)
	printf 'Content-Type: text/plain\nno blank line ends these headers'
	;;
/fresh)
	[ -e /tmp/mark ] && seen=yes || seen=no
	touch /tmp/mark
	printf 'Content-Type: text/plain\n\nseen=%s\n' "$seen"
	;;
*)
	printf 'Status: 404 Not Found\nContent-Type: text/plain\n\nno such path: %s\n' "$PATH_INFO"
	;;
esac
