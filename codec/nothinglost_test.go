package codec

import (
	"bytes"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestFunctionIOKeepsWhatItCannotCarry: what a FunctionIO document has no
// place for, or cannot hold, survives a function that echoes it: the XR's
// readiness an earlier step decided, and connection details whose bytes
// are not UTF-8.
func TestFunctionIOKeepsWhatItCannotCarry(t *testing.T) {
	req := fioRequest(t)
	req.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	binary := []byte{0x30, 0x82, 0xff, 0x00, 0xfe}
	req.Desired.Composite.ConnectionDetails = map[string][]byte{"key": binary, "text": []byte("plain")}
	doc, err := FunctionIO{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := FunctionIO{}.Decode(req, doc) // the function prints what it read
	if err != nil {
		t.Fatal(err)
	}
	xr := rsp.GetDesired().GetComposite()
	if xr.GetReady() != fnv1.Ready_READY_FALSE {
		t.Errorf("the XR's readiness: %v, want the earlier step's READY_FALSE", xr.GetReady())
	}
	if got := xr.GetConnectionDetails()["key"]; !bytes.Equal(got, binary) {
		t.Errorf("a binary connection detail: sent % x, got back % x", binary, got)
	}
	// A value the function changed is its own, whatever it was.
	changed := bytes.Replace(doc, []byte("plain"), []byte("other"), 1)
	if rsp, err = (FunctionIO{}).Decode(req, changed); err != nil {
		t.Fatal(err)
	}
	if got := string(rsp.GetDesired().GetComposite().GetConnectionDetails()["text"]); got != "other" {
		t.Errorf("a changed connection detail: %q, want the function's %q", got, "other")
	}
}

// TestFunctionIOLeftOutCompositeKeepsItsDetails: a function that leaves the
// XR out keeps the request's, its connection details included, when it
// derives more from a composed resource; and the request is not changed.
func TestFunctionIOLeftOutCompositeKeepsItsDetails(t *testing.T) {
	req := fioRequest(t)
	req.Desired.Composite.ConnectionDetails = map[string][]byte{"earlier": []byte("e")}
	out := `
desired:
  resources:
  - name: bucket
    resource: {apiVersion: s3.example.org/v1, kind: Bucket}
    connectionDetails: [{name: region, type: FromValue, value: eu}]
`
	rsp, err := FunctionIO{}.Decode(req, []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	got := rsp.GetDesired().GetComposite().GetConnectionDetails()
	if string(got["earlier"]) != "e" || string(got["region"]) != "eu" {
		t.Errorf("the XR's connection details: %v, want the earlier step's and the derived one", got)
	}
	if d := req.GetDesired().GetComposite().GetConnectionDetails(); len(d) != 1 || string(d["earlier"]) != "e" {
		t.Errorf("Decode changed the request's XR: its connection details are now %v", d)
	}
}

// TestKRMWithoutItemsKeepsDesired: a ResourceList with no items at all (a
// validator printing its results alone) keeps the desired resources, with
// a warning, where items: [] deletes them.
func TestKRMWithoutItemsKeepsDesired(t *testing.T) {
	req := krmRequest(t)
	want := len(req.GetDesired().GetResources())
	if want == 0 {
		t.Fatal("the request has no desired resources to keep")
	}
	rsp, err := KRM{}.Decode(req, []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nresults:\n- {message: all good, severity: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rsp.GetDesired().GetResources()); n != want {
		t.Errorf("no items: %d desired resources, want the request's %d", n, want)
	}
	var warned bool
	for _, r := range rsp.GetResults() {
		warned = warned || (r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && strings.Contains(r.GetMessage(), "has no items"))
	}
	if !warned {
		t.Errorf("no warning that the ResourceList had no items: %v", rsp.GetResults())
	}
	if rsp, err = (KRM{}).Decode(req, []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")); err != nil {
		t.Fatal(err)
	}
	if n := len(rsp.GetDesired().GetResources()); n != 0 {
		t.Errorf("items: []: %d desired resources, want none", n)
	}
}

// TestYAMLModesRefuseASecondDocument: output of two YAML documents is
// refused, naming the second, instead of the second being ignored;
// separators and comments around one document are fine.
func TestYAMLModesRefuseASecondDocument(t *testing.T) {
	krm := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"
	fio := fioOutput("")
	for _, c := range []struct {
		name  string
		codec Codec
		req   *fnv1.RunFunctionRequest
		out   string
		ok    bool
	}{
		{"krm", KRM{}, krmRequest(t), "---\n# the list\n" + krm + "---\n# nothing more\n...\n", true},
		{"krm", KRM{}, krmRequest(t), krm + "---\n" + strings.Replace(krm, "items: []", "items:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}", 1), false},
		{"functionio", FunctionIO{}, fioRequest(t), "---\n" + fio, true},
		{"functionio", FunctionIO{}, fioRequest(t), fio + "---\ndesired:\n  resources:\n  - name: other\n    resource: {kind: X}\n", false},
		// A document ends at "..." too, and the next needs no "---".
		{"krm", KRM{}, krmRequest(t), krm + "...\napiVersion: v1\nkind: ConfigMap\n", false},
		{"functionio", FunctionIO{}, fioRequest(t), fio + "... # end\ndesired:\n  resources:\n  - name: other\n    resource: {kind: X}\n", false},
		{"krm", KRM{}, krmRequest(t), strings.ReplaceAll(krm+"---\n"+krm, "\n", "\r\n"), false},
		// An empty document first is skipped, not read as the answer.
		{"krm", KRM{}, krmRequest(t), "---\n# header\n---\n" + krm, true},
		{"functionio", FunctionIO{}, fioRequest(t), "--- # none\n...\n" + fio, true},
		// A directive, or content on the marker's line, is one document.
		{"krm", KRM{}, krmRequest(t), "%YAML 1.1\n---\n" + krm, true},
		{"krm", KRM{}, krmRequest(t), "--- {apiVersion: config.kubernetes.io/v1, kind: ResourceList, items: []}\n", true},
		// Markers indented in a block scalar are its text.
		{"krm", KRM{}, krmRequest(t), krm[:len(krm)-len("items: []\n")] + "items:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    x: |\n      ---\n      ...\n", true},
	} {
		_, err := c.codec.Decode(c.req, []byte(c.out))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s, one document: %v", c.name, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "more than one YAML document")):
			t.Errorf("%s, two documents: %v, want them refused", c.name, err)
		}
	}
}
