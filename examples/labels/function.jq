# function-labels: label and annotate everything the pipeline composed.
#
# Every desired composed resource gets
#   - the labels of the XR named in input.fromComposite (when the XR has them),
#   - then input.labels, which win over what the resource had,
#   - and input.annotations.
# Run it as the last step, so it sees what every step before composed.

.observed.composite.resource as $xr
| (.input.labels // {}) as $labels
| (.input.annotations // {}) as $annotations
| (.input.fromComposite // []) as $propagate
| (($xr.metadata.labels // {}) | with_entries(select(.key as $k | $propagate | any(. == $k))))
  as $inherited
| .desired
| .resources |= map_values(
    .resource.metadata.labels = ((.resource.metadata.labels // {}) + $inherited + $labels)
    | if ($annotations | length) > 0
      then .resource.metadata.annotations = ((.resource.metadata.annotations // {}) + $annotations)
      else . end)
| {
    desired: .,
    results: [{severity: "SEVERITY_NORMAL", message: "labelled \(.resources | length) resources"}]
  }
