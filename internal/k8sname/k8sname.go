// Package k8sname checks the names Kubernetes accepts for most objects,
// without linking Kubernetes' validation package (and klog with it) into
// every command for one regular expression.
package k8sname

import "regexp"

// dns1123Subdomain is an RFC 1123 subdomain in lower case, as Kubernetes'
// IsDNS1123Subdomain checks it.
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// Why says why name is not an RFC 1123 subdomain of at most 253
// characters, the name of most Kubernetes objects ("" if it is one).
func Why(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case len(name) > 253:
		return "the name is longer than 253 characters"
	case !dns1123Subdomain.MatchString(name):
		return "the name must consist of lower case letters, digits, '-' and '.', and start and end with a letter or digit"
	}
	return ""
}
