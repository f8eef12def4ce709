package pipeline

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestObjectMetaIsMetaV1s: objectMeta reads and writes metadata as
// Kubernetes' ObjectMeta does, which it stands for: the same keys kept and
// dropped, the same values, the same refusals.
func TestObjectMetaIsMetaV1s(t *testing.T) {
	for _, md := range []string{
		`{}`,
		`{"name": "a", "owner": "x", "labels": {"a": "true"}, "annotations": {"b": "1.5"}}`,
		`{"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "9", "generation": 3, "selfLink": "/x", "generateName": "a-"}`,
		`{"creationTimestamp": "2024-05-01T10:20:30+02:00", "deletionTimestamp": "2024-05-02T00:00:00Z", "deletionGracePeriodSeconds": 30}`,
		`{"creationTimestamp": null, "finalizers": ["f"], "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "1", "controller": true, "extra": 1}]}`,
		`{"managedFields": [{"manager": "m", "operation": "Apply", "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}, "subresource": "status", "other": 2}]}`,
		`{"ownerReferences": [{"kind": "K"}], "managedFields": [{"fieldsV1": null}]}`,
		`{"labels": {"a": 1}}`,
		`{"generation": "3"}`,
		`{"creationTimestamp": "yesterday"}`,
	} {
		var want, got map[string]any
		var m metav1.ObjectMeta
		wantErr := json.Unmarshal([]byte(md), &m)
		if wantErr == nil {
			b, _ := json.Marshal(m)
			_ = json.Unmarshal(b, &want)
		}
		var o objectMeta
		gotErr := json.Unmarshal([]byte(md), &o)
		if gotErr == nil {
			b, _ := json.Marshal(o)
			_ = json.Unmarshal(b, &got)
		}
		if (wantErr != nil) != (gotErr != nil) || !reflect.DeepEqual(want, got) {
			t.Errorf("%s:\n got %v (%v)\nwant %v (%v)", md, got, gotErr, want, wantErr)
		}
	}
}
