#!/bin/sh
# __NAME__: a Crossplane composition function as a shell script.
#
# stdin:  the RunFunctionRequest as JSON (read it once; keep it in a variable)
# stdout: the RunFunctionResponse as JSON, and nothing else
# stderr: anything you want to log; `ocifn test` shows it, and when the
#         function fails its last lines explain why
# exit:   0 when stdout holds the response; anything else is a Fatal result
#
# In the request: .observed.composite.resource is the composite resource
# (XR), .observed.resources the composed resources that exist, .desired what
# earlier steps want (keep it, add to it), .input this step's input,
# .context the pipeline's context. Field names are protobuf JSON names
# (lowerCamelCase); enum values are strings such as "SEVERITY_NORMAL".
set -eu

req=$(cat)
get() { printf '%s' "$req" | jq -r "$1"; }

name=$(get '.observed.composite.resource.metadata.name')
greeting=$(get '.observed.composite.resource.spec.greeting // .input.defaultGreeting // "Hello"')
to=$(get '.observed.composite.resource.spec.to // "world"')
message="$greeting, $to!"
echo "composing a greeting for $name: $message" >&2

# Keep what earlier steps desired; add a composed resource named "greeting"
# (a ConfigMap has no Ready condition, so the function says it is ready) and
# what the XR's status should say.
printf '%s' "$req" | jq -c --arg message "$message" --arg name "$name" '
	.desired
	| .resources.greeting = {
		resource: {apiVersion: "v1", kind: "ConfigMap", data: {message: $message}},
		ready: "READY_TRUE"
	}
	| .composite.resource.status.message = $message
	| {desired: ., results: [{severity: "SEVERITY_NORMAL", message: "composed a greeting for \($name)"}]}'
