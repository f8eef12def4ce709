package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/oci"
)

// TestOperationCall makes the call a Crossplane v2 Operation makes: no
// composite (observed or desired), the resources the Operation requires,
// and a function that answers with output, which comes back whole.
func TestOperationCall(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("jq-function.tar"), "--warm", "0"})
	// What an Operation that checks certificate expiry might send.
	req := jsonRequest(t, `{
		"meta": {"tag": "op-1", "capabilities": ["CAPABILITY_CAPABILITIES", "CAPABILITY_REQUIRED_RESOURCES", "CAPABILITY_CREDENTIALS", "CAPABILITY_CONDITIONS", "CAPABILITY_REQUIRED_SCHEMAS"]},
		"input": {"filter": "{output: {checked: [.requiredResources.certs.items[].resource.metadata.name], expiring: [.requiredResources.certs.items[] | select(.resource.status.daysLeft < 30) | .resource.metadata.name], sawComposite: (.observed.composite != null), capabilities: .meta.capabilities}, results: [{severity: \"SEVERITY_NORMAL\", message: \"checked \\(.requiredResources.certs.items | length) certificates\"}]}"},
		"requiredResources": {"certs": {"items": [
			{"resource": {"apiVersion": "v1", "kind": "Certificate", "metadata": {"name": "web"}, "status": {"daysLeft": 12}}},
			{"resource": {"apiVersion": "v1", "kind": "Certificate", "metadata": {"name": "api"}, "status": {"daysLeft": 80}}}
		]}}
	}`)
	rsp := s.call(t, req)

	want, err := structpb.NewStruct(map[string]any{
		"checked":      []any{"web", "api"},
		"expiring":     []any{"web"},
		"sawComposite": false,
		"capabilities": []any{"CAPABILITY_CAPABILITIES", "CAPABILITY_REQUIRED_RESOURCES", "CAPABILITY_CREDENTIALS", "CAPABILITY_CONDITIONS", "CAPABILITY_REQUIRED_SCHEMAS"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, rsp.GetOutput()); d != "" {
		t.Errorf("output (-want +got):\n%s\nlog:\n%s", d, s.stderr)
	}
	// The function's one result, and no Warning: there was no desired
	// state to keep.
	if rs := rsp.GetResults(); len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL || rs[0].GetMessage() != "checked 2 certificates" {
		t.Errorf("results %v", rs)
	}
	if rsp.GetMeta().GetTag() != "op-1" || rsp.GetDesired().GetComposite() != nil || len(rsp.GetDesired().GetResources()) != 0 {
		t.Errorf("meta %v, desired %v", rsp.GetMeta(), rsp.GetDesired())
	}
}

// TestBuildMetadata: ocifn build declares spec.capabilities in the
// metadata it generates, [composition, operation] unless --capabilities
// says otherwise, and packages an explicit --package-file as it is; --io
// records the I/O mode in the package's config (label and environment,
// for ocifn serve in the pod), and nothing is recorded without it.
func TestBuildMetadata(t *testing.T) {
	rt := runtimeImage(t)
	dir := t.TempDir()
	fnFile := func(name, extra string) string {
		p := filepath.Join(dir, name)
		text := "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-a\n" + extra
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCaps []string
		wantIO   string
	}{
		{"generated_default", []string{"--name", "function-a"}, []string{"composition", "operation"}, ""},
		{"generated_composition_only_with_io", []string{"--name", "function-a", "--capabilities", "composition", "--io", "json"}, []string{"composition"}, "json"},
		{"generated_none", []string{"--name", "function-a", "--capabilities", ""}, nil, ""},
		{"package_file_without_capabilities_kept", []string{"--package-file", fnFile("plain.yaml", "")}, nil, ""},
		{"package_file_with_capabilities_kept", []string{"--package-file", fnFile("op.yaml", "spec:\n  capabilities:\n  - operation\n")}, []string{"operation"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkg := filepath.Join(dir, tc.name+".xpkg")
			args := append([]string{"build", "--from-oci-tarball", image("passthrough.tar"), "--runtime-image-tarball", rt, "-o", pkg}, tc.args...)
			if out, err := runOcifn(t, args...); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			img, err := oci.Open(pkg)
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			data, _, _, err := oci.PackageYAML(img.Image())
			if err != nil {
				t.Fatal(err)
			}
			meta, err := oci.ParsePackageMeta(data)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(meta.Function.Capabilities, tc.wantCaps) {
				t.Errorf("spec.capabilities %v, want %v:\n%s", meta.Function.Capabilities, tc.wantCaps, data)
			}
			if tc.wantCaps == nil && strings.Contains(string(data), "capabilities") {
				t.Errorf("package.yaml declares capabilities:\n%s", data)
			}

			cf := img.ConfigFile()
			env := ""
			for _, e := range cf.Config.Env {
				if v, ok := strings.CutPrefix(e, oci.EnvIO+"="); ok {
					env = v
				}
			}
			if cf.Config.Labels[oci.LabelIO] != tc.wantIO || env != tc.wantIO {
				t.Errorf("I/O mode: label %q, env %q; want %q", cf.Config.Labels[oci.LabelIO], env, tc.wantIO)
			}
			fn, err := oci.OpenFunction(pkg, oci.WithScratchDir(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer fn.Close()
			if fn.IOMode() != tc.wantIO {
				t.Errorf("the served function's mode %q, want %q", fn.IOMode(), tc.wantIO)
			}

			out, err := runOcifn(t, "inspect", pkg)
			if err != nil {
				t.Fatalf("inspect: %v\n%s", err, out)
			}
			if tc.wantCaps != nil {
				mustContain(t, "inspect", out, "capabilities "+strings.Join(tc.wantCaps, ", "))
			}
		})
	}
	out, err := runOcifn(t, "build", "--from-oci-tarball", image("passthrough.tar"), "--runtime-image-tarball", rt,
		"-o", filepath.Join(dir, "refused.xpkg"), "--package-file", fnFile("refused.yaml", ""), "--capabilities", "operation")
	if err == nil {
		t.Fatalf("build took --capabilities with --package-file:\n%s", out)
	}
	mustContain(t, "build's error", out, "--capabilities applies to generated metadata", "set spec.capabilities in the file")
}
