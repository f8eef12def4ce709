# Input: a RunFunctionRequest. Output: a RunFunctionResponse that keeps all of
# desired (composite included), labels every composed resource, says how many
# it labelled and passes the pipeline context on.
(.desired.resources // {}) as $composed
| {
    desired: (.desired | .resources = ($composed | map_values(.resource.metadata.labels["ocifn.dev/labelized"] = $value))),
    results: [{severity: "SEVERITY_NORMAL", message: "labelized \($composed | length) resources"}]
  }
  + (if .context == null then {} else {context: .context} end)
