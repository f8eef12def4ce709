package pipeline

import (
	"bytes"
	"encoding/json"
	"time"
)

// objectMeta is Kubernetes' ObjectMeta (k8s.io/apimachinery's meta/v1) as
// JSON carries it, which is all render needs of it: the fields an
// Operation's metadata keeps, and the type each is read as. It is written
// out here rather than imported: meta/v1 brought its whole package tree
// into every ocifn process, and 1.5–1.7 MB more of the serving process's
// memory at idle (PSS, its binary's pages), for render alone.
type objectMeta struct {
	Name                       string               `json:"name,omitempty"`
	GenerateName               string               `json:"generateName,omitempty"`
	Namespace                  string               `json:"namespace,omitempty"`
	SelfLink                   string               `json:"selfLink,omitempty"`
	UID                        string               `json:"uid,omitempty"`
	ResourceVersion            string               `json:"resourceVersion,omitempty"`
	Generation                 int64                `json:"generation,omitempty"`
	CreationTimestamp          metaTime             `json:"creationTimestamp,omitempty,omitzero"`
	DeletionTimestamp          *metaTime            `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64               `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string    `json:"labels,omitempty"`
	Annotations                map[string]string    `json:"annotations,omitempty"`
	OwnerReferences            []ownerReference     `json:"ownerReferences,omitempty"`
	Finalizers                 []string             `json:"finalizers,omitempty"`
	ManagedFields              []managedFieldsEntry `json:"managedFields,omitempty"`
}

type ownerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

type managedFieldsEntry struct {
	Manager     string    `json:"manager,omitempty"`
	Operation   string    `json:"operation,omitempty"`
	APIVersion  string    `json:"apiVersion,omitempty"`
	Time        *metaTime `json:"time,omitempty"`
	FieldsType  string    `json:"fieldsType,omitempty"`
	FieldsV1    *rawJSON  `json:"fieldsV1,omitempty"`
	Subresource string    `json:"subresource,omitempty"`
}

// metaTime is meta/v1's Time: RFC 3339 to the second, written in UTC, and
// null when zero (a creationTimestamp, never given or null, is left out, as meta/v1 leaves it out with omitzero).
type metaTime struct{ time.Time }

func (t *metaTime) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	pt, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = pt.Local()
	return nil
}

func (t metaTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

// rawJSON is meta/v1's FieldsV1: JSON kept as it is.
type rawJSON struct{ raw []byte }

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	if !bytes.Equal(b, []byte("null")) {
		r.raw = append(r.raw[:0], b...)
	}
	return nil
}

func (r rawJSON) MarshalJSON() ([]byte, error) {
	if r.raw == nil {
		return []byte("null"), nil
	}
	return r.raw, nil
}
