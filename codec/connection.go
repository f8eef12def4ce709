package codec

import (
	"encoding/json"
	"fmt"

	"github.com/ocifn/ocifn/internal/fieldpath"
)

// Connection detail types: where an XR connection detail derived from a
// composed resource comes from, as Crossplane 1.13 took them.
const (
	connectionFromConnectionSecretKey = "FromConnectionSecretKey"
	connectionFromFieldPath           = "FromFieldPath"
	connectionFromValue               = "FromValue"
)

// derivedConnectionDetail says how to derive one XR connection detail from
// a composed resource.
type derivedConnectionDetail struct {
	Name                    *string `json:"name,omitempty"`
	Type                    string  `json:"type"`
	FromConnectionSecretKey *string `json:"fromConnectionSecretKey,omitempty"`
	FromFieldPath           *string `json:"fromFieldPath,omitempty"`
	Value                   *string `json:"value,omitempty"`
}

// deriveConnectionDetails returns the XR connection details the rules derive
// from a composed resource, given its observed body and connection details
// (both nil when it does not exist yet). As in Crossplane 1.13, a secret key
// or a field that is not there yet is skipped, not an error: it may appear on
// a later call; a rule that lacks what its type needs is an error.
func deriveConnectionDetails(observed map[string]any, conn map[string][]byte, rules []derivedConnectionDetail) (map[string][]byte, error) {
	out := map[string][]byte{}
	for i, r := range rules {
		name := ""
		if r.Name != nil {
			name = *r.Name
		}
		switch r.Type {
		case connectionFromValue:
			if r.Value == nil {
				return nil, fmt.Errorf("connectionDetails[%d]: type %q requires value", i, r.Type)
			}
			if name == "" {
				return nil, fmt.Errorf("connectionDetails[%d]: type %q requires name", i, r.Type)
			}
			out[name] = []byte(*r.Value)
		case connectionFromConnectionSecretKey:
			if r.FromConnectionSecretKey == nil || *r.FromConnectionSecretKey == "" {
				return nil, fmt.Errorf("connectionDetails[%d]: type %q requires fromConnectionSecretKey", i, r.Type)
			}
			// The name defaults to the key.
			if name == "" {
				name = *r.FromConnectionSecretKey
			}
			if v, ok := conn[*r.FromConnectionSecretKey]; ok {
				out[name] = v
			}
		case connectionFromFieldPath:
			if r.FromFieldPath == nil || *r.FromFieldPath == "" {
				return nil, fmt.Errorf("connectionDetails[%d]: type %q requires fromFieldPath", i, r.Type)
			}
			if name == "" {
				return nil, fmt.Errorf("connectionDetails[%d]: type %q requires name", i, r.Type)
			}
			if observed == nil {
				continue
			}
			if v, ok := fieldValue(fieldpath.Object(observed), *r.FromFieldPath); ok {
				out[name] = v
			}
		default:
			return nil, fmt.Errorf("connectionDetails[%d]: unknown type %q (want one of FromConnectionSecretKey, FromFieldPath, FromValue)", i, clip(r.Type, keyBytes))
		}
	}
	return out, nil
}

// fieldValue reads a field as Crossplane 1.13 did for a connection detail: a
// string as it is, anything else as JSON.
func fieldValue(p fieldpath.Object, path string) ([]byte, bool) {
	if s, err := p.GetString(path); err == nil {
		return []byte(s), true
	}
	v, err := p.GetValue(path)
	if err != nil {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return b, true
}
