package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// yaml11BoolSeeds are documents that hold the words quoteYAML11Bools
// quotes where it must and where it must not.
var yaml11BoolSeeds = []string{
	"a: on\nb: off\nc: yes\nd: no\ne: y\nf: n\n",
	"on: 1\nY: 2\n'n': 3\n\"yes\": 4\n",
	"a: [on, off, Yes, NO, y]\nb: {on: on, off: [n]}\n",
	"- on\n- - off\n  - yes\n-   no   # on\n- y\n",
	"? on\n: off\n? [yes]\n: {no: y}\n",
	"a: &x on\nb: *x\nc: &y [off]\nd: *y\n",
	"base: &b {on: yes, n: 1}\nother:\n  <<: *b\n  y: off\n",
	"a: !!str on\nb: !!bool yes\nc: ! on\nd: !foo off\ne: &a !!str no\nf: !!str &b no\n",
	"# on\na: no # off\n# yes: no\nb: 'on'\nc: \"off\"\n",
	"a: |\n  on\n  off\nb: >\n  yes\n  no\nc: |-\n  y\n",
	"a: on\n  off\nb: 'on\n  off'\nc: \"yes\n  no\"\nd: no way\ne: y-n\nf: on.off\n",
	"a: on\r\nb: off\r\n- \r\n",
	"a: on\r\nb: [yes,\r\n  no]\r\n",
	"\uFEFFa: on\nb: off\n",
	"a:\ton\nb: off\t\n",
	"é: on\nb: ñ\nc: [é, on]\n\u00e9\u00e9: {x: off}\n",
	"--- on\n",
	"---\na: on\n...\n",
	"%YAML 1.1\n---\na: on\n",
	"a: on\u0085b: off\n",
	"a: x\u2028b: on\n",
	"a: \"\u0085\"\nb: on\n",
	"a: " + strings.Repeat("x", 5000) + "\nb: on\n",
	"a: " + strings.Repeat("on ", 2000) + "\nb: on\n",
	"a: onion\nb: nope\nc: yesterday\nd: 'y'\n",
	"a: - on\nb: -on\nc: on-\nd: :on\n",
	"[on, {off: yes}, [n, Y]]\n",
	"{a: on, b: off}\n",
	"on\n",
	"a: {? on, n}\n",
	"a: [on: off]\n",
	"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- kind: A\n  spec: {x: on}\n",
	"a: !!str\n  on\n",
	"&a on: *a\n",
	"a: &anchor-on-x !!str on\n",
	"a: !!str &xx-on-xxx on\n",
	"a:\n  - &x\n    on\n",
	"a: 2001-12-14\nb: on\n",
	"%TAG !e! tag:yaml.org,2002:\n---\na: !e!str on\n",
	"\uFEFFoff",
	"\uFEFF  on: 1\n",
	"\uFEFF\uFEFFoff",
	"0: Y\r#000000\r\n",
	`{"a":on}`,
	`{'a':off, "b":[y], [c]:n}`,
	"a: on\u0085",
	"x: 1\u0085on: 1",
	"[on\u0085]",
	"- on\u2029- n",
	"a: &x\u2028  on\n",
}

// FuzzQuoteYAML11Bools: a document read by YAML 1.1 after
// quoteYAML11Bools, as the krm mode reads it, has the value YAML 1.2
// (go.yaml.in/yaml/v3, as kyaml) gives the document, and the quoting
// changes nothing else of the document, comments included.
//
// What legitimately differs between the two readings, and is normalised:
// YAML 1.2 reads a timestamp as a time, 1.1 (into any) as the string; and
// sigs.k8s.io/yaml converts through JSON, so numbers are float64, a key
// that is not a string is written as one, and a document with a key or
// value JSON cannot hold (a null or out-of-range key, .inf, .nan) is
// refused; v2 reads a scalar with the non-specific tag "!" as a string,
// v3 as if it had no tag; and v3 reads 0o+1, 0o-1, 0b+1 and 0b-1 as
// integers, v2 (and YAML 1.2) as strings.
func FuzzQuoteYAML11Bools(f *testing.F) {
	for _, s := range yaml11BoolSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		checkQuoteYAML11Bools(t, doc)
	})
}

func checkQuoteYAML11Bools(t *testing.T, doc []byte) {
	t.Helper()
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil {
		if got := quoteYAML11Bools(doc); !bytes.Equal(got, doc) {
			t.Fatalf("a document that does not parse was changed:\n%q\n%q", doc, got)
		}
		return
	}
	out := quoteYAML11Bools(doc)

	// By YAML 1.2 nothing changed but the style of the words quoted.
	var after yamlv3.Node
	if err := yamlv3.Unmarshal(out, &after); err != nil {
		t.Fatalf("the quoted document does not parse: %v\n%q\n%q", err, doc, out)
	}
	quoted := 0
	if err := sameNodes(&root, &after, &quoted); err != nil {
		t.Fatalf("%v\n%q\n%q", err, doc, out)
	}
	// The parser may give a comment to another node when the scalar
	// before it is quoted; its text is what must not change.
	if a, b := comments(&root), comments(&after); !slices.Equal(a, b) {
		t.Fatalf("comments %q became %q:\n%q\n%q", a, b, doc, out)
	}
	if len(out)-len(doc) != 2*quoted {
		t.Fatalf("%d bytes added to quote %d scalars:\n%q\n%q", len(out)-len(doc), quoted, doc, out)
	}

	// By YAML 1.1, through JSON, the value YAML 1.2 gives the original.
	want, ok := yaml12AsJSON(&root)
	if !ok || nonSpecificTag.Match(doc) {
		return
	}
	var got any
	if err := yaml.UnmarshalStrict(out, &got); err != nil {
		// Where go.yaml.in/yaml/v2 refuses what v3 reads, the quoting
		// did not make it refuse.
		var orig any
		if err2 := yaml.UnmarshalStrict(doc, &orig); err2 == nil || err2.Error() != err.Error() {
			t.Fatalf("the quoted document is refused (%v; the original: %v):\n%q\n%q", err, err2, doc, out)
		}
		return
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("read by YAML 1.1 after quoting (-YAML 1.2 +got):\n%s\n%q\n%q", d, doc, out)
	}
}

// sameNodes says how a and b, the YAML 1.2 trees of a document before and
// after quoting, differ other than by plain scalars of yaml11Bools become
// double-quoted ones, which it counts in quoted.
func sameNodes(a, b *yamlv3.Node, quoted *int) error {
	if a.Kind != b.Kind || a.Tag != b.Tag || a.Value != b.Value || a.Anchor != b.Anchor || a.Line != b.Line || len(a.Content) != len(b.Content) {
		return fmt.Errorf("node at %d:%d %v %q %q became %v %q %q", a.Line, a.Column, a.Kind, a.Tag, a.Value, b.Kind, b.Tag, b.Value)
	}
	if a.Style != b.Style {
		if a.Style != 0 || b.Style != yamlv3.DoubleQuotedStyle || a.Kind != yamlv3.ScalarNode || !yaml11Bools[a.Value] || a.Tag != "!!str" {
			return fmt.Errorf("scalar %q at %d:%d changed style from %v to %v", a.Value, a.Line, a.Column, a.Style, b.Style)
		}
		*quoted++
	}
	if a.Kind == yamlv3.AliasNode {
		return nil
	}
	for i := range a.Content {
		if err := sameNodes(a.Content[i], b.Content[i], quoted); err != nil {
			return err
		}
	}
	return nil
}

// nonSpecificTag matches the tag "!", which go.yaml.in/yaml/v2 takes, as
// the YAML specification says, to make a plain scalar a string (! 1 is
// "1", ! alone ""), and v3 ignores (1, null).
var nonSpecificTag = regexp.MustCompile(`(^|[\s\[{,\x{85}\x{2028}\x{2029}])!([\s\]},\x{85}\x{2028}\x{2029}]|$)`)

// signedAfterPrefix matches what go.yaml.in/yaml/v3 reads as an integer,
// against YAML 1.2, whose 0o and 0b integers have no sign after the
// prefix, and v2 as a string.
var signedAfterPrefix = regexp.MustCompile(`^-?0[bo][+-]`)

// comments are the comments of the tree at n, sorted.
func comments(n *yamlv3.Node) []string {
	var all []string
	var walk func(n *yamlv3.Node)
	walk = func(n *yamlv3.Node) {
		for _, c := range []string{n.HeadComment, n.LineComment, n.FootComment} {
			for _, l := range strings.Split(c, "\n") {
				if l != "" { // blank lines between comments come and go with them
					all = append(all, l)
				}
			}
		}
		if n.Kind != yamlv3.AliasNode {
			for _, c := range n.Content {
				walk(c)
			}
		}
	}
	walk(n)
	slices.Sort(all)
	return all
}

// yaml12AsJSON is the value YAML 1.2 gives root, as sigs.k8s.io/yaml
// gives a YAML 1.1 one: through JSON. ok is false when JSON cannot hold it.
func yaml12AsJSON(root *yamlv3.Node) (v any, ok bool) {
	// go.yaml.in/yaml/v2 reads a timestamp into any as its text, and
	// 0o+1 as a string.
	var untime func(n *yamlv3.Node)
	untime = func(n *yamlv3.Node) {
		if n.Kind == yamlv3.ScalarNode && (n.Tag == "!!timestamp" || n.Tag == "!!int" && n.Style == 0 && signedAfterPrefix.MatchString(n.Value)) {
			n.Tag = "!!str"
		}
		if n.Kind != yamlv3.AliasNode {
			for _, c := range n.Content {
				untime(c)
			}
		}
	}
	untime(root)
	var x any
	if err := root.Decode(&x); err != nil {
		return nil, false
	}
	x, ok = jsonable(x)
	if !ok {
		return nil, false
	}
	j, err := json.Marshal(x)
	if err != nil {
		return nil, false
	}
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, false
	}
	return v, true
}

// jsonable converts a go.yaml.in/yaml/v3 value as sigs.k8s.io/yaml
// converts a v2 one: keys become strings.
func jsonable(v any) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range t {
			var ok bool
			if m[k], ok = jsonable(e); !ok {
				return nil, false
			}
		}
		return m, true
	case map[any]any:
		m := map[string]any{}
		for k, e := range t {
			var s string
			switch k := k.(type) {
			case string:
				s = k
			case int:
				s = strconv.Itoa(k)
			case float64:
				if math.IsInf(k, 0) || math.IsNaN(k) {
					return nil, false
				}
				s = strconv.FormatFloat(k, 'g', -1, 32)
			case bool:
				s = strconv.FormatBool(k)
			default:
				return nil, false // v2 has no other keys JSON can hold
			}
			if _, dup := m[s]; dup {
				return nil, false
			}
			var ok bool
			if m[s], ok = jsonable(e); !ok {
				return nil, false
			}
		}
		return m, true
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			var ok bool
			if s[i], ok = jsonable(e); !ok {
				return nil, false
			}
		}
		return s, true
	}
	return v, true
}

// FuzzMarshalYAML: whatever JSON value the YAML modes send, the function
// reads it back as it is, by YAML 1.1 (sigs.k8s.io/yaml) and by YAML 1.2
// (go.yaml.in/yaml/v3, as kyaml), and where sigs.k8s.io/yaml's Marshal
// writes it without loss (it holds no NEL and no key "<<"), marshalYAML
// writes the same.
func FuzzMarshalYAML(f *testing.F) {
	for _, s := range []string{
		`{"a": "caf\u0085e", "\u0085": ["\u2028", "\u2029", "\u0000\u0001\u001f\u007f\u0080\u009f"]}`,
		`{"n": [0, -0, 1, -1, 1.5, 1e21, 1e-7, 9007199254740993, 18446744073709551615, 18446744073709551616, 1e308, 5e-324, -9223372036854775808]}`,
		`{"s": ["on", "yes", "y", "no", "n", "true", "1", "1.0", "0o17", "0x1F", "2001-12-14", "~", "null", "", " ", "- a", "a: b", "#", "---", "...", "\ufeffa", "\ufffe", "\uffff", "\ud800", "a\tb", "a\nb", "a\r\nb", "  a  ", "<<", "=", "!x", "&a", "*a", "%x", "@", "` + "`" + `"]}`,
		`{"k": {"on": 1, "y": 2, "1": 3, "": 4, "\u0085": 5, "a b": 6, "-": 7, "?": 8, ":": 9}}`,
		`{"data": {"<<": "v", "a": "<<"}, "spec": {"<<": {"a": 1, "b": 2}, "b": 3}, "l": [{"<<": [{"a": 1}]}]}`,
		`[[], {}, [[]], [{}], null, true, false]`,
		`"` + strings.Repeat("x ", 100) + `"`,
		`{"long": "` + strings.Repeat("a\u0085", 50) + `"}`,
		`"\u00a0\u1680\u2000\u200b\u3000\ue000\U0001F600"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return
		}
		out, err := marshalYAML(v)
		if err != nil {
			t.Fatalf("marshalYAML(%#v): %v", v, err)
		}
		var got any
		if err := yaml.UnmarshalStrict(out, &got); err != nil {
			t.Fatalf("%v, reading back\n%s", err, out)
		}
		if d := cmp.Diff(v, got); d != "" {
			t.Fatalf("read back by YAML 1.1 (-want +got):\n%s\n%s", d, out)
		}
		// go.yaml.in/yaml/v3 reads the plain string 0o+1 as 1.
		if !v3Misreads(v) {
			var got3 any
			if err := yamlv3.Unmarshal(out, &got3); err != nil {
				t.Fatalf("%v, reading back by YAML 1.2\n%s", err, out)
			}
			if got3, ok := jsonable(got3); !ok {
				t.Fatalf("YAML 1.2 reads %#v\n%s", got3, out)
			} else if j, err := json.Marshal(got3); err != nil {
				t.Fatalf("YAML 1.2 reads %#v: %v\n%s", got3, err, out)
			} else if err := json.Unmarshal(j, &got3); err != nil {
				t.Fatal(err)
			} else if d := cmp.Diff(v, got3); d != "" {
				t.Fatalf("read back by YAML 1.2 (-want +got):\n%s\n%s", d, out)
			}
		}
		if j, _ := json.Marshal(v); bytes.Contains(j, []byte("\u0085")) {
			return
		}
		// Nor does it write a key "<<" without loss: plain, a merge key.
		want, err := yaml.Marshal(v)
		var back any
		if err == nil && yaml.Unmarshal(want, &back) == nil && cmp.Equal(v, back) && !bytes.Equal(want, out) {
			t.Fatalf("sigs.k8s.io/yaml writes\n%q\nmarshalYAML\n%q", want, out)
		}
	})
}

// TestQuoteYAML11BoolsOnOneLongLine: output on one line (flow or JSON-like
// YAML) full of the words is quoted in time linear in its length: 1 MiB
// took minutes when each word's offset was counted from the line's start.
func TestQuoteYAML11BoolsOnOneLongLine(t *testing.T) {
	doc := []byte("a: [" + strings.Repeat("y,", 1<<19) + "n]\n")
	done := make(chan []byte, 1)
	go func() { done <- quoteYAML11Bools(doc) }()
	select {
	case out := <-done:
		if want := len(doc) + 2*(1<<19+1); len(out) != want {
			t.Errorf("%d bytes, want %d: every word quoted", len(out), want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("quoting %d bytes on one line takes over 30s", len(doc))
	}
}

// v3Misreads says whether v holds a string go.yaml.in/yaml/v3 reads, when
// plain, as an integer, against YAML 1.2 (signedAfterPrefix).
func v3Misreads(v any) bool {
	switch t := v.(type) {
	case string:
		return signedAfterPrefix.MatchString(t)
	case map[string]any:
		for k, e := range t {
			if v3Misreads(k) || v3Misreads(e) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if v3Misreads(e) {
				return true
			}
		}
	}
	return false
}
