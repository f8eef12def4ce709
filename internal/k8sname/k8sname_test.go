package k8sname

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestWhyAgreesWithKubernetes: the names Why accepts are those
// Kubernetes' own check accepts.
func TestWhyAgreesWithKubernetes(t *testing.T) {
	for _, name := range []string{
		"", "a", "function-labels", "a.b.c", "0abc", "abc0", "a-b.c-d",
		"-a", "a-", "a_b", "A", "a..b", ".a", "a.", "a/b", "a:b", "é",
		strings.Repeat("a", 253), strings.Repeat("a", 254),
		strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), strings.Repeat("a", 64),
	} {
		ours := Why(name) == ""
		theirs := len(validation.IsDNS1123Subdomain(name)) == 0
		if ours != theirs {
			t.Errorf("%q: Why says valid %v (%q), Kubernetes %v", name, ours, Why(name), theirs)
		}
	}
}
