package codec

import (
	"fmt"

	"github.com/ocifn/ocifn/internal/fieldpath"
)

// Readiness check types, as Crossplane 1.13 took them from a Composition's
// resources and from a FunctionIO's desired resources.
const (
	readinessNonEmpty       = "NonEmpty"
	readinessMatchString    = "MatchString"
	readinessMatchInteger   = "MatchInteger"
	readinessMatchCondition = "MatchCondition"
	readinessNone           = "None"
)

// readinessCheck says how to tell that a composed resource is ready.
type readinessCheck struct {
	Type           string               `json:"type"`
	FieldPath      *string              `json:"fieldPath,omitempty"`
	MatchString    *string              `json:"matchString,omitempty"`
	MatchInteger   *int64               `json:"matchInteger,omitempty"`
	MatchCondition *matchConditionCheck `json:"matchCondition,omitempty"`
}

// matchConditionCheck is the condition a MatchCondition check looks for.
// Crossplane's API server defaulted an empty type to Ready and an empty
// status to True; a function's output never met that defaulting, so it is
// done here.
type matchConditionCheck struct {
	Type   string `json:"type,omitempty"`
	Status string `json:"status,omitempty"`
}

// validate says what a check lacks, as Crossplane 1.13 refused it.
func (c readinessCheck) validate() error {
	switch c.Type {
	case readinessNone:
		return nil
	case readinessMatchCondition:
		if c.MatchCondition == nil {
			return fmt.Errorf("type %q requires matchCondition", c.Type)
		}
		return nil
	case readinessNonEmpty:
	case readinessMatchString:
		if c.MatchString == nil {
			return fmt.Errorf("type %q requires matchString", c.Type)
		}
	case readinessMatchInteger:
		if c.MatchInteger == nil {
			return fmt.Errorf("type %q requires matchInteger", c.Type)
		}
	default:
		return fmt.Errorf("unknown type %q (want one of NonEmpty, MatchString, MatchInteger, MatchCondition, None)", clip(c.Type, keyBytes))
	}
	if c.FieldPath == nil || *c.FieldPath == "" {
		return fmt.Errorf("type %q requires fieldPath", c.Type)
	}
	return nil
}

// ready runs the check against an observed resource. A field that is not
// there makes the resource not ready, not an error: it may appear later.
func (c readinessCheck) ready(p fieldpath.Object) (bool, error) {
	if err := c.validate(); err != nil {
		return false, err
	}
	switch c.Type {
	case readinessNone:
		return true, nil
	case readinessMatchCondition:
		t, s := c.MatchCondition.Type, c.MatchCondition.Status
		if t == "" {
			t = "Ready"
		}
		if s == "" {
			s = "True"
		}
		return conditionStatus(p, t) == s, nil
	case readinessNonEmpty:
		_, err := p.GetValue(*c.FieldPath)
		return found(err)
	case readinessMatchString:
		v, err := p.GetString(*c.FieldPath)
		if ok, err := found(err); !ok {
			return false, err
		}
		return v == *c.MatchString, nil
	case readinessMatchInteger:
		v, err := p.GetInteger(*c.FieldPath)
		if ok, err := found(err); !ok {
			return false, err
		}
		return v == *c.MatchInteger, nil
	}
	return false, nil
}

// found turns a field path lookup's error into (present, error): a missing
// field is no error.
func found(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case fieldpath.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// conditionStatus is the status of the resource's condition of the given
// type, "Unknown" when it has none, as Crossplane reads conditions.
func conditionStatus(p fieldpath.Object, conditionType string) string {
	var conds []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	}
	if err := p.GetValueInto("status.conditions", &conds); err != nil {
		return "Unknown"
	}
	for _, c := range conds {
		if c.Type == conditionType {
			return c.Status
		}
	}
	return "Unknown"
}

// resourceReady says whether an observed composed resource is ready by its
// checks, all of which must pass. With no checks, the resource is ready
// when its Ready condition is True, Crossplane 1.13's default.
func resourceReady(observed map[string]any, checks []readinessCheck) (bool, error) {
	p := fieldpath.Object(observed)
	if len(checks) == 0 {
		return conditionStatus(p, "Ready") == "True", nil
	}
	for i, c := range checks {
		ok, err := c.ready(p)
		if err != nil {
			return false, fmt.Errorf("readinessChecks[%d]: %w", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
