package codec

import (
	"fmt"
	"math"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// nonFinite is where the YAML document doc holds its first infinity or
// NaN (.inf, -.inf, .nan), in document order, as a field path
// ("items[3].spec.x"), and the scalar as written. The YAML modes' decoder
// turns a document into JSON, which has no such numbers, and its error
// ("json: unsupported value: +Inf") says neither where nor which. ok is
// false when doc holds none or does not parse. An alias is not followed:
// its anchor, where the value is written, is found first.
func nonFinite(doc []byte) (path, value string, ok bool) {
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil {
		return "", "", false
	}
	// The path is written once, for the value found: written at every
	// level on the way down, it took memory quadratic in the nesting
	// (155 MB for 20 KB of lists nested 9,900 deep).
	var found *pathStep
	var walk func(n *yamlv3.Node, at *pathStep) bool
	walk = func(n *yamlv3.Node, at *pathStep) bool {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				if walk(c, at) {
					return true
				}
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				if walk(c, &pathStep{parent: at, index: i}) {
					return true
				}
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if walk(n.Content[i+1], &pathStep{parent: at, key: n.Content[i].Value, isKey: true}) {
					return true
				}
			}
		case yamlv3.ScalarNode:
			if n.ShortTag() != "!!float" {
				return false
			}
			var f float64
			if err := n.Decode(&f); err == nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
				found, value = at, n.Value
				return true
			}
		}
		return false
	}
	if !walk(&root, nil) {
		return "", "", false
	}
	if path = found.String(); path == "" {
		path = "the document"
	}
	return path, value, true
}

// pathStep is one step of a field path, from its parent's: a key, or an
// index of a list.
type pathStep struct {
	parent *pathStep
	key    string
	isKey  bool
	index  int
}

// String is the path to s in Crossplane's field path syntax; "" for none.
func (s *pathStep) String() string {
	var steps []*pathStep
	for ; s != nil; s = s.parent {
		steps = append(steps, s)
	}
	path := ""
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].isKey {
			path = fieldPathJoin(path, steps[i].key)
		} else {
			path = fmt.Sprintf("%s[%d]", path, steps[i].index)
		}
	}
	return path
}

// fieldPathJoin is path's field key, in Crossplane's field path syntax: a
// key that holds a period or a bracket is written in brackets
// (metadata.annotations[example.org/size]).
func fieldPathJoin(path, key string) string {
	if strings.ContainsAny(key, ".[]") {
		return path + "[" + key + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// nonFiniteError says where doc holds a number that JSON cannot, for
// what, a document the function printed; nil when it holds none.
func nonFiniteError(what string, doc []byte) error {
	path, value, ok := nonFinite(doc)
	if !ok {
		return nil
	}
	return fmt.Errorf("the function's output is not a valid %s: %s is %s, and JSON, so Crossplane, has no infinity or NaN; print a finite number or a string", what, clip(path, keyBytes), clip(value, keyBytes))
}
