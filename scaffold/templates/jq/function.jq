# __NAME__: a Crossplane composition function in jq.
#
# jq runs this program on the RunFunctionRequest (JSON on stdin); what it
# prints is the RunFunctionResponse (JSON on stdout). In the request:
#
#   .observed.composite.resource  the composite resource (XR)
#   .observed.resources           the composed resources that exist, by name
#   .desired                      what earlier steps want: keep it, add to it
#   .input                        this step's input, from the Composition
#   .context                      the pipeline's context
#
# .desired and .observed are always there, with .resources ({} when empty).
# Field names are protobuf JSON names (lowerCamelCase); enum values are
# strings such as "SEVERITY_NORMAL" and "READY_TRUE".

.observed.composite.resource as $xr
| "\($xr.spec.greeting // .input.defaultGreeting // "Hello"), \($xr.spec.to // "world")!" as $message
| .desired
# A composed resource, named "greeting" in the pipeline's state. It has no
# Ready condition of its own, so the function says it is ready.
| .resources.greeting = {
    resource: {apiVersion: "v1", kind: "ConfigMap", data: {message: $message}},
    ready: "READY_TRUE"
  }
# What the XR's status should say.
| .composite.resource.status.message = $message
| {
    desired: .,
    results: [{severity: "SEVERITY_NORMAL", message: "composed a greeting for \($xr.metadata.name)"}]
  }
