package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/oci"
)

// yamlStruct parses YAML into a Struct, for requests written as a
// Composition author would.
func yamlStruct(t *testing.T, y string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatalf("bad test YAML: %v\n%s", err, y)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// xfnRequest is a call to the xfn-legacy function whose config composes
// the given resource entries (FunctionIO desired resources, YAML), with a
// bucket observed: Available, 3 replicas, an endpoint, Ready and not Synced,
// and connection details.
func xfnRequest(t *testing.T, tag, config string) *fnv1.RunFunctionRequest {
	t.Helper()
	return &fnv1.RunFunctionRequest{
		Meta:  &fnv1.RequestMeta{Tag: tag},
		Input: yamlStruct(t, "apiVersion: xfn.example.org/v1alpha1\nkind: Config\n"+config),
		Observed: &fnv1.State{
			Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata: {name: xb}\nspec: {region: eu}\n")},
			Resources: map[string]*fnv1.Resource{
				"bucket": {
					Resource: yamlStruct(t, `
apiVersion: s3.example.org/v1
kind: Bucket
metadata: {name: xb-bucket}
status:
  phase: Available
  replicas: 3
  endpoint: {host: xb.s3.example, port: 443}
  conditions:
  - {type: Ready, status: "True"}
  - {type: Synced, status: "False"}
`),
					ConnectionDetails: map[string][]byte{"password": []byte("s3cr3t"), "username": []byte("admin")},
				},
			},
		},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata: {name: xb}\n")},
			Resources: map[string]*fnv1.Resource{
				"policy": {Resource: yamlStruct(t, "apiVersion: iam.example.org/v1\nkind: Policy\nmetadata: {name: p}\n"), Ready: fnv1.Ready_READY_TRUE},
			},
		},
		Context: yamlStruct(t, "apiextensions.crossplane.io/environment: {region: eu}\n"),
	}
}

// bucketWith is a config that composes the bucket with the given extra
// FunctionIO fields (readinessChecks, connectionDetails).
func bucketWith(extra string) string {
	return "resources:\n- name: bucket\n  resource: {apiVersion: s3.example.org/v1, kind: Bucket, spec: {versioning: true}}\n" + extra
}

// TestFunctionIOReadinessChecks: each readiness check a 1.13 function could
// set on a desired resource, evaluated against the observed resource into
// ready, as Crossplane 1.13 did; with no checks, the Ready condition.
func TestFunctionIOReadinessChecks(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("xfn-legacy.tar"), "--io", "functionio", "--warm", "1"})
	cases := []struct {
		name, checks string
		want         fnv1.Ready
	}{
		{"no_checks_ready_condition", "", fnv1.Ready_READY_TRUE},
		{"match_string", "[{type: MatchString, fieldPath: status.phase, matchString: Available}]", fnv1.Ready_READY_TRUE},
		{"match_string_other", "[{type: MatchString, fieldPath: status.phase, matchString: Creating}]", fnv1.Ready_READY_FALSE},
		{"match_integer", "[{type: MatchInteger, fieldPath: status.replicas, matchInteger: 3}]", fnv1.Ready_READY_TRUE},
		{"match_integer_other", "[{type: MatchInteger, fieldPath: status.replicas, matchInteger: 5}]", fnv1.Ready_READY_FALSE},
		{"non_empty", "[{type: NonEmpty, fieldPath: status.endpoint.host}]", fnv1.Ready_READY_TRUE},
		{"non_empty_absent", "[{type: NonEmpty, fieldPath: status.atProvider.arn}]", fnv1.Ready_READY_FALSE},
		{"match_condition", "[{type: MatchCondition, matchCondition: {type: Ready, status: 'True'}}]", fnv1.Ready_READY_TRUE},
		{"match_condition_other", "[{type: MatchCondition, matchCondition: {type: Synced, status: 'True'}}]", fnv1.Ready_READY_FALSE},
		{"none", "[{type: None}]", fnv1.Ready_READY_TRUE},
		{"all_must_pass", "[{type: None}, {type: MatchInteger, fieldPath: status.replicas, matchInteger: 5}]", fnv1.Ready_READY_FALSE},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := ""
			if tc.checks != "" {
				extra = "  readinessChecks: " + tc.checks + "\n"
			}
			rsp := s.call(t, xfnRequest(t, tc.name, bucketWith(extra)))
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					t.Fatalf("Fatal result: %s", r.GetMessage())
				}
			}
			if got := rsp.GetDesired().GetResources()["bucket"].GetReady(); got != tc.want {
				t.Errorf("bucket ready = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("invalid_check_is_fatal", func(t *testing.T) {
		rsp := s.call(t, xfnRequest(t, "invalid", bucketWith("  readinessChecks: [{type: MatchString, fieldPath: status.phase}]\n")))
		rs := rsp.GetResults()
		if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("results %v, want one Fatal", rs)
		}
		mustContain(t, "the Fatal result", rs[0].GetMessage(), `desired.resources[1] (bucket): readinessChecks[0]: type "MatchString" requires matchString`)
	})
}

// TestFunctionIOConnectionDetails: each way a 1.13 function derived the
// XR's connection details from a composed resource, taken from the observed
// resource's connection details and fields, plus the XR's own.
func TestFunctionIOConnectionDetails(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("xfn-legacy.tar"), "--io", "functionio", "--warm", "1"})
	cases := []struct {
		name, config string
		want         map[string]string
	}{
		{"from_connection_secret_key", bucketWith("  connectionDetails: [{name: pw, type: FromConnectionSecretKey, fromConnectionSecretKey: password}]\n"),
			map[string]string{"pw": "s3cr3t"}},
		{"from_connection_secret_key_default_name", bucketWith("  connectionDetails: [{type: FromConnectionSecretKey, fromConnectionSecretKey: username}]\n"),
			map[string]string{"username": "admin"}},
		{"from_field_path", bucketWith("  connectionDetails: [{name: host, type: FromFieldPath, fromFieldPath: status.endpoint.host}, {name: port, type: FromFieldPath, fromFieldPath: status.endpoint.port}]\n"),
			map[string]string{"host": "xb.s3.example", "port": "443"}},
		{"from_value", bucketWith("  connectionDetails: [{name: region, type: FromValue, value: eu-west-1}]\n"),
			map[string]string{"region": "eu-west-1"}},
		{"not_there_yet", bucketWith("  connectionDetails: [{name: k, type: FromConnectionSecretKey, fromConnectionSecretKey: token}, {name: arn, type: FromFieldPath, fromFieldPath: status.atProvider.arn}]\n"),
			map[string]string{}},
		{"xr_own_details", "connectionDetails: [{name: url, value: 'https://xb.example'}]\n",
			map[string]string{"url": "https://xb.example"}},
		// 1.13 derived the XR's details after taking its own from the
		// document, so a stale value passed on never hid a fresh one.
		{"derived_wins_over_xr_own", bucketWith("  connectionDetails: [{name: pw, type: FromConnectionSecretKey, fromConnectionSecretKey: password}]\n") +
			"connectionDetails: [{name: pw, value: stale}, {name: url, value: 'https://xb.example'}]\n",
			map[string]string{"pw": "s3cr3t", "url": "https://xb.example"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rsp := s.call(t, xfnRequest(t, tc.name, tc.config))
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					t.Fatalf("Fatal result: %s", r.GetMessage())
				}
			}
			got := map[string]string{}
			for k, v := range rsp.GetDesired().GetComposite().GetConnectionDetails() {
				got[k] = string(v)
			}
			if len(got) != len(tc.want) {
				t.Errorf("XR connection details %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("XR connection detail %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestFunctionIOResponse: what the 1.13 function prints is mapped back: the
// resources list becomes the desired map (what it passed through included),
// the XR it changed becomes the desired composite, severities become
// SEVERITY_*, and the tag and context are the request's.
func TestFunctionIOResponse(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("xfn-legacy.tar"), "--io", "functionio", "--warm", "0"})
	rsp := s.call(t, xfnRequest(t, "full", bucketWith("results: [{severity: Warning, message: versioning is on}, {severity: Fatal, message: quota exceeded}]\n")))
	if got := rsp.GetMeta().GetTag(); got != "full" {
		t.Errorf("tag %q", got)
	}
	if got := rsp.GetContext().GetFields()["apiextensions.crossplane.io/environment"].GetStructValue().GetFields()["region"].GetStringValue(); got != "eu" {
		t.Errorf("context not kept: %v", rsp.GetContext())
	}
	res := rsp.GetDesired().GetResources()
	if len(res) != 2 || res["policy"] == nil || res["bucket"] == nil {
		t.Fatalf("desired resources %v, want policy (passed through) and bucket", res)
	}
	if v := res["bucket"].GetResource().GetFields()["spec"].GetStructValue().GetFields()["versioning"].GetBoolValue(); !v {
		t.Errorf("bucket %v, want spec.versioning true", res["bucket"].GetResource())
	}
	if res["policy"].GetReady() != fnv1.Ready_READY_TRUE {
		t.Errorf("policy ready = %v, want the earlier step's READY_TRUE kept", res["policy"].GetReady())
	}
	xr := rsp.GetDesired().GetComposite().GetResource()
	if got := xr.GetFields()["status"].GetStructValue().GetFields()["xfnLegacy"].GetStringValue(); got != "composed 1 resources" {
		t.Errorf("desired XR %v, want status.xfnLegacy", xr)
	}
	want := []struct {
		sev fnv1.Severity
		msg string
	}{
		{fnv1.Severity_SEVERITY_WARNING, "versioning is on"},
		{fnv1.Severity_SEVERITY_FATAL, "quota exceeded"},
		{fnv1.Severity_SEVERITY_NORMAL, "xfn-legacy: composed 1 resources"},
	}
	rs := rsp.GetResults()
	if len(rs) != len(want) {
		t.Fatalf("results %v, want %d", rs, len(want))
	}
	for i, w := range want {
		if rs[i].GetSeverity() != w.sev || rs[i].GetMessage() != w.msg {
			t.Errorf("result %d: %v %q, want %v %q", i, rs[i].GetSeverity(), rs[i].GetMessage(), w.sev, w.msg)
		}
	}
}

// TestFunctionIOWithoutDesiredKeepsDesired: a function that prints no
// desired state at all (here the document with desired deleted, and a
// result) keeps the request's, with a warning, as every mode does, rather
// than having every composed resource an earlier step desired deleted.
func TestFunctionIOWithoutDesiredKeepsDesired(t *testing.T) {
	img := configuredImage(t, "xfn-legacy.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", "-P", "-p", "yaml", "-o", "yaml", `del(.desired) | .results = [{"severity": "Normal", "message": "looked"}]`, "-"}
	})
	s := startServer(t, []string{"--tarball", img, "--io", "functionio", "--warm", "0"})
	req := xfnRequest(t, "no-desired", "")
	rsp := s.call(t, req)
	if got := rsp.GetDesired().GetResources(); len(got) != 1 || got["policy"].GetReady() != fnv1.Ready_READY_TRUE {
		t.Errorf("desired resources %v, want the request's policy kept", got)
	}
	if got := rsp.GetDesired().GetComposite().GetResource().GetFields()["kind"].GetStringValue(); got != "XBucket" {
		t.Errorf("desired XR %v, want the request's", rsp.GetDesired().GetComposite())
	}
	var msgs []string
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Errorf("Fatal result: %s", r.GetMessage())
		}
		msgs = append(msgs, r.GetSeverity().String()+" "+r.GetMessage())
	}
	mustContain(t, "the results", strings.Join(msgs, "\n"), "SEVERITY_NORMAL looked",
		`SEVERITY_WARNING the function's response has no "desired" field; the request's desired state was kept unchanged`)
}

// TestFunctionIOModeFromImage: an xfn image whose config records the mode
// (label dev.ocifn.io, as ocifn build --io functionio writes it) is served
// in that mode without --io.
func TestFunctionIOModeFromImage(t *testing.T) {
	labeled := labeledImage(t, "xfn-legacy.tar", map[string]string{oci.LabelIO: "functionio"})
	s := startServer(t, []string{"--tarball", labeled, "--warm", "0"})
	mustContain(t, "serve's log", s.stderr.String(), "io=functionio")
	rsp := s.call(t, xfnRequest(t, "labeled", bucketWith("")))
	if rsp.GetDesired().GetResources()["bucket"].GetReady() != fnv1.Ready_READY_TRUE {
		t.Errorf("response %v, want the bucket composed and ready", rsp)
	}
}

// TestFunctionIOModeMismatch: an xfn image served in json mode, and a json
// image served in functionio mode, get a Fatal result that names the mode
// the image was written for.
func TestFunctionIOModeMismatch(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"xfn_image_in_json_mode", []string{"--tarball", image("xfn-legacy.tar"), "--io", "json"},
			[]string{"a FunctionIO document", "--io functionio"}},
		{"json_image_in_functionio_mode", []string{"--tarball", image("trivial.tar"), "--io", "functionio"},
			[]string{"not a valid FunctionIO document", "a RunFunctionResponse", "--io json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, append(tc.args, "--warm", "0"))
			rsp := s.call(t, xfnRequest(t, tc.name, bucketWith("")))
			rs := rsp.GetResults()
			if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
				t.Fatalf("results %v, want one Fatal", rs)
			}
			mustContain(t, "the Fatal result", rs[0].GetMessage(), tc.wants...)
			if strings.Contains(rs[0].GetMessage(), "s3cr3t") {
				t.Errorf("the Fatal result quotes a connection detail: %s", rs[0].GetMessage())
			}
		})
	}
}

// TestFunctionIOMigratedComposition: the README's migration guide, run. A
// Crossplane 1.13 Composition's `functions:` entry becomes a pipeline step
// whose Function is the same image packaged with `ocifn build --io
// functionio`; `ocifn render` runs that package in the mode it records,
// next to a json function (the labelizer), with the bucket observed so
// that its readiness check passes.
func TestFunctionIOMigratedComposition(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "function-xfn-bucket.xpkg")
	if out, err := runOcifn(t, "build", "--from-oci-tarball", image("xfn-legacy.tar"), "--name", "function-xfn-bucket",
		"--runtime-image-tarball", runtimeImage(t), "--io", "functionio", "-o", pkg); err != nil {
		t.Fatalf("ocifn build: %v\n%s", err, out)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("xr.yaml", "apiVersion: example.org/v1\nkind: XBucket\nmetadata:\n  name: demo\nspec:\n  region: eu\n")
	write("composition.yaml", `apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata:
  name: xbuckets.example.org
spec:
  compositeTypeRef:
    apiVersion: example.org/v1
    kind: XBucket
  mode: Pipeline
  pipeline:
  - step: compose-bucket
    functionRef:
      name: function-xfn-bucket
    input:
      apiVersion: xfn.example.org/v1alpha1
      kind: Config
      resources:
      - name: bucket
        resource:
          apiVersion: s3.example.org/v1
          kind: Bucket
          spec:
            region: eu
        readinessChecks:
        - type: MatchString
          fieldPath: status.phase
          matchString: Available
        connectionDetails:
        - name: endpoint
          type: FromFieldPath
          fromFieldPath: status.endpoint
  - step: labels
    functionRef:
      name: function-labelizer
`)
	write("functions.yaml", `apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-xfn-bucket
  annotations:
    render.ocifn.dev/tarball: function-xfn-bucket.xpkg
spec:
  package: registry.example.com/function-xfn-bucket:v0.1.0
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-labelizer
  annotations:
    render.ocifn.dev/tarball: `+image("labelizer.tar")+`
spec:
  package: registry.example.com/function-labelizer:v0.1.0
`)
	write("observed.yaml", `apiVersion: s3.example.org/v1
kind: Bucket
metadata:
  name: demo-bucket
  annotations:
    crossplane.io/composition-resource-name: bucket
spec:
  region: eu
status:
  phase: Available
  endpoint: demo.s3.example
`)
	r := runIn(t, dir, nil, "render", "--cache-dir", cacheDir(t), "-r", "--observed-resources", "observed.yaml",
		"xr.yaml", "composition.yaml", "functions.yaml")
	if r.exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	mustContain(t, "render's output", r.stdout,
		"xfnLegacy: composed 1 resources", "kind: Bucket", "ocifn.dev/labelized: \"true\"",
		"xfn-legacy: composed 1 resources")
	// How render words an unready resource differs between its versions.
	if strings.Contains(r.stdout, "Unready resources") || strings.Contains(r.stdout, `"bucket" is not yet ready`) {
		t.Errorf("the bucket is not ready, although its MatchString check passes on the observed bucket:\n%s", r.stdout)
	}
}

// serverSetMetadata is what the API server sets in an object's metadata,
// as an observed object carries it.
const serverSetMetadata = `
  resourceVersion: "4711"
  uid: 6f1c9f2e-4b4e-4a53-9d1a-2c3b3f7f0a11
  generation: 3
  creationTimestamp: "2026-01-02T03:04:05Z"
  managedFields:
  - {manager: apiextensions.crossplane.io/composite, operation: Apply, apiVersion: example.org/v1, fieldsType: FieldsV1, fieldsV1: {"f:status": {}}}
`

// TestFunctionIOCopiedObservedStateIsApplicable: a 1.13 function that
// copies the observed XR and an observed composed resource into desired,
// as 1.13 itself filled desired with them, has the fields the API server
// sets dropped from what it desires: Crossplane v2 server-side applies
// the desired state, and the API server refuses an apply that carries
// metadata.managedFields (400), and one whose resourceVersion is stale
// (409). What the function set, and the objects' names and labels, stay.
func TestFunctionIOCopiedObservedStateIsApplicable(t *testing.T) {
	img := configuredImage(t, "xfn-legacy.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", "-P", "-p", "yaml", "-o", "yaml",
			`.desired.composite.resource = .observed.composite.resource | .desired.composite.resource.status.copied = true | .desired.resources = [.observed.resources[] | {"name": .name, "resource": .resource}]`, "-"}
	})
	s := startServer(t, []string{"--tarball", img, "--io", "functionio", "--warm", "0"})
	req := xfnRequest(t, "copied", "")
	req.Observed.Composite.Resource = yamlStruct(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata:\n  name: xb\n  labels: {team: a}"+serverSetMetadata+
		"spec: {region: eu}\nstatus:\n  conditions:\n  - {type: Ready, status: \"False\", reason: Creating}\n")
	req.Observed.Resources["bucket"].Resource = yamlStruct(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata:\n  name: xb-bucket"+serverSetMetadata+"spec: {versioning: true}\n")
	rsp := s.call(t, req)
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("Fatal result: %s", r.GetMessage())
		}
	}
	for what, r := range map[string]*structpb.Struct{
		"desired XR":     rsp.GetDesired().GetComposite().GetResource(),
		"desired bucket": rsp.GetDesired().GetResources()["bucket"].GetResource(),
	} {
		md := r.GetFields()["metadata"].GetStructValue().GetFields()
		for _, f := range []string{"resourceVersion", "uid", "generation", "creationTimestamp", "managedFields"} {
			if v, ok := md[f]; ok {
				t.Errorf("%s has metadata.%s %v, which the API server sets", what, f, v)
			}
		}
		if md["name"].GetStringValue() == "" {
			t.Errorf("%s lost its name: %v", what, r)
		}
	}
	xr := rsp.GetDesired().GetComposite().GetResource().GetFields()
	if got := xr["metadata"].GetStructValue().GetFields()["labels"].GetStructValue().GetFields()["team"].GetStringValue(); got != "a" {
		t.Errorf("desired XR %v, want its labels kept", xr)
	}
	if !xr["status"].GetStructValue().GetFields()["copied"].GetBoolValue() {
		t.Errorf("desired XR %v, want status.copied the function set", xr)
	}
	if !rsp.GetDesired().GetResources()["bucket"].GetResource().GetFields()["spec"].GetStructValue().GetFields()["versioning"].GetBoolValue() {
		t.Errorf("desired bucket %v, want its spec kept", rsp.GetDesired().GetResources()["bucket"])
	}
}
