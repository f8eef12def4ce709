# function-buckets: derive N composed resources from the XR's spec.count.
#
# For an XBucketSet with spec.count N, compose the Buckets bucket-0 ...
# bucket-(N-1) in spec.region. Lowering the count drops the last buckets from
# the desired state, and Crossplane deletes them. A count that is not a whole
# number, or above the step input's maxCount, is a Fatal result: the pipeline
# stops and nothing changes.

.observed.composite.resource as $xr
| .input as $in
| ($xr.spec.count // 1) as $count
| ($in.maxCount // 10) as $max
| if ($count | type) != "number" or $count < 0 or $count != ($count | floor) then
    {results: [{severity: "SEVERITY_FATAL", message: "spec.count must be a whole number of buckets, got \($count | tojson)"}]}
  elif $count > $max then
    {results: [{severity: "SEVERITY_FATAL", message: "spec.count is \($count), but a bucket set may have at most \($max) buckets (input maxCount)"}]}
  else
    .desired
    | reduce range(0; $count) as $i (.;
        .resources["bucket-\($i)"] = {
          resource: {
            apiVersion: "s3.aws.upbound.io/v1beta1",
            kind: "Bucket",
            spec: {
              forProvider: {
                region: $xr.spec.region,
                tags: {"bucket-set": $xr.metadata.name, "index": "\($i)"}
              },
              deletionPolicy: ($in.deletionPolicy // "Delete")
            }
          }
        })
    | {desired: ., results: [{severity: "SEVERITY_NORMAL", message: "composed \($count) buckets in \($xr.spec.region)"}]}
  end
