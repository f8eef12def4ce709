# The response of function-status; see status.sh.

def ready: (.resource.status.conditions // []) | any(.type == "Ready" and .status == "True");

.observed.resources as $observed
| .desired
| .resources |= with_entries(
    if ($observed[.key] // {} | ready) then .value.ready = "READY_TRUE" else . end)
| ([.resources | keys[] | {
      name: .,
      externalName: ($observed[.]?.resource.metadata.annotations["crossplane.io/external-name"]
                     // $observed[.]?.resource.metadata.name // ""),
      ready: ($observed[.] // {} | ready)
    }]) as $list
| ([$list[] | select(.ready)] | length) as $readyCount
| .composite.resource.status.resources = $list
| .composite.resource.status.readyResources = "\($readyCount)/\($list | length)"
| {
    desired: .,
    conditions: [
      if $readyCount == ($list | length) then
        {type: "ResourcesReady", status: "STATUS_CONDITION_TRUE", reason: "AllReady"}
      else
        {type: "ResourcesReady", status: "STATUS_CONDITION_FALSE", reason: "Waiting",
         message: "\($readyCount) of \($list | length) composed resources are ready"}
      end
    ],
    results: [{severity: "SEVERITY_NORMAL", message: "\($readyCount) of \($list | length) composed resources are ready"}]
  }
