package codec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/internal/memtest"
)

// responseOutputs are, for each costly shape, what a function prints in
// each mode to answer with that shape as its desired state.
func responseOutputs(t *testing.T, n int) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for name, shape := range memtest.Shapes(n) {
		desired := shape.GetDesired()
		if desired == nil {
			desired = &fnv1.State{Composite: shape.GetObserved().GetComposite()}
		}
		j, err := protojson.Marshal(&fnv1.RunFunctionResponse{Desired: desired})
		if err != nil {
			t.Fatal(err)
		}
		req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: proto.Clone(desired).(*fnv1.State)}
		if req.Desired.Composite == nil {
			req.Desired.Composite = &fnv1.Resource{}
		}
		if req.Desired.Composite.Resource == nil {
			// FunctionIO wants a composite resource in the state.
			req.Desired.Composite.Resource = &structpb.Struct{}
		}
		out[name] = map[string][]byte{"json": j}
		for _, cd := range []Codec{FunctionIO{}, KRM{}} {
			b, err := cd.Encode(req)
			if err != nil {
				t.Fatalf("%s, %s: %v", cd.Name(), name, err)
			}
			out[name][cd.Name()] = b
		}
	}
	return out
}

// decodeBound is what a server charges before it decodes out with cd.
func decodeBound(cd Codec, out []byte) int64 {
	n := cd.DecodeMemory(out)
	if ac, ok := cd.(AliasCounter); ok {
		n += ac.AliasMemory(out)
	}
	return n
}

// breaks are YAML's line breaks, each of which a YAML 1.1 decoder takes.
var breaks = map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r", "NEL": "\u0085", "LS": "\u2028"}

// TestDecodeMemoryBoundsDecode: each codec's DecodeMemory (with
// AliasMemory) is at least what its Decode holds at once for outputs of
// every costly shape; for the same outputs made invalid at their end, so
// that Decode reads them again to say why; for output in another mode's
// format; for YAML lists of nulls whose lines end in each of YAML's line
// breaks; and for lists nested 9,900 deep in output that cannot be read.
func TestDecodeMemoryBoundsDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large responses")
	}
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: &fnv1.State{Composite: &fnv1.Resource{}}}
	type tc struct {
		cd        Codec
		name, out string
	}
	var cases []tc
	for name, outs := range responseOutputs(t, 30000) {
		j := outs["json"]
		cases = append(cases,
			tc{JSON{}, name, string(j)},
			tc{JSON{}, name + ", invalid", string(j[:len(j)-1]) + `,"bogus":1}`},
			tc{JSON{}, name + ", as YAML", string(outs["functionio"])})
		for _, cd := range []Codec{FunctionIO{}, KRM{}} {
			y := outs[cd.Name()]
			cases = append(cases,
				tc{cd, name, string(y)},
				tc{cd, name + ", invalid", string(y) + "bogus: 1\n"})
		}
	}
	for bname, br := range breaks {
		items := strings.Repeat("      -"+br, 100000)
		fio := strings.Join([]string{"apiVersion: apiextensions.crossplane.io/v1alpha1", "kind: FunctionIO", "desired:", "  composite:", "    resource:", "      a:", ""}, br) + items
		krm := strings.Join([]string{"apiVersion: config.kubernetes.io/v1", "kind: ResourceList", "items:", "- apiVersion: v1", "  kind: X", "  a:", ""}, br) + strings.ReplaceAll(items, "      -", "  -")
		cases = append(cases, tc{FunctionIO{}, "nulls, lines ending in " + bname, fio}, tc{KRM{}, "nulls, lines ending in " + bname, krm}, tc{JSON{}, "nulls, lines ending in " + bname, fio})
	}
	// Plain values YAML 1.1 reads as booleans, which the krm mode parses
	// once more to quote (quoteYAML11Bools).
	ons := strings.Join([]string{"apiVersion: config.kubernetes.io/v1", "kind: ResourceList", "items:", "- apiVersion: v1", "  kind: X", "  a:", ""}, "\n") + strings.Repeat("  - on\n", 100000)
	cases = append(cases, tc{KRM{}, "plain on values", ons}, tc{KRM{}, "plain on values, invalid", ons + "bogus: 1\n"})
	// Output nested deep that cannot be read for a reason that is not a
	// field the format lacks: Decode looks through every level for an
	// infinity to name (nonFinite).
	deep := strings.Repeat("[", 9900) + strings.Repeat("]", 9900)
	cases = append(cases,
		tc{KRM{}, "lists nested 9,900 deep, invalid", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- oops\n- {apiVersion: v1, kind: X, metadata: {name: a}, spec: " + deep + "}\n"},
		tc{FunctionIO{}, "lists nested 9,900 deep, invalid", "desired:\n  composite: {resource: {spec: " + deep + "}}\n  resources: oops\n"})
	for _, c := range cases {
		out := []byte(c.out)
		var rsp *fnv1.RunFunctionResponse
		bound := decodeBound(c.cd, out)
		used := memtest.PeakWithin(bound, func() { rsp, _ = c.cd.Decode(req, out) })
		runtime.KeepAlive(rsp)
		t.Logf("%-10s %-34s %9d bytes: decoding held %10d (%5.1f/byte), bound %10d (%.1fx)", c.cd.Name(), c.name, len(out), used, float64(used)/float64(len(out)), bound, float64(bound)/float64(used))
		if used > bound {
			t.Errorf("%s, %s: decoding held %d bytes, past the bound of %d", c.cd.Name(), c.name, used, bound)
		}
	}
}

// TestAliasParseMemory: the parse that counts aliases holds no more than
// DecodeMemory charges for it, for output of every costly shape.
func TestAliasParseMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large responses")
	}
	for name, outs := range responseOutputs(t, 30000) {
		for _, mode := range []string{"functionio", "krm"} {
			out := outs[mode]
			c := countOutput(out)
			bound := aliasParseMemory(c)
			used := memtest.PeakWithin(bound, func() { _, _ = aliasAdds(out) })
			t.Logf("%-10s %-18s %9d bytes: the parse held %10d, bound %10d (%.1fx)", mode, name, len(out), used, bound, float64(bound)/float64(used))
			if used > bound {
				t.Errorf("%s, %s: the parse held %d bytes, past the bound of %d", mode, name, used, bound)
			}
		}
	}
}

// TestDecodeMemoryBoundsAliases: YAML output whose aliases expand to a
// hundred thousand values and more stays within its bound.
func TestDecodeMemoryBoundsAliases(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large responses")
	}
	list := func(item string, n int) string { return strings.TrimSuffix(strings.Repeat(item+", ", n), ", ") }
	// The YAML decoder refuses a document of which more than 99% comes
	// from aliases: a plain list makes up the rest.
	plain := fmt.Sprintf("plain: [%s]\n", list("0", 10000))
	bomb := func(key func(i int) string) string {
		var b strings.Builder
		b.WriteString(plain)
		fmt.Fprintf(&b, "%s&l0 [%s]\n", key(0), list("0", 10))
		for i := 1; i <= 4; i++ {
			fmt.Fprintf(&b, "%s&l%d [%s]\n", key(i), i, list(fmt.Sprintf("*l%d", i-1), 10))
		}
		return b.String()
	}
	specs := map[string]string{
		"lists of lists": bomb(func(i int) string { return fmt.Sprintf("l%d: ", i) }),
		// A quoted key's value may follow its colon at once.
		"quoted keys": "{" + strings.ReplaceAll(strings.TrimSuffix(bomb(func(i int) string { return fmt.Sprintf("\"l%d\":", i) }), "\n"), "\n", ", ") + "}\n",
		// An alias repeats a scalar's bytes.
		"a long string": fmt.Sprintf("s: &s %s\nl: [%s]\n", strings.Repeat("x", 100000), list("*s", 50)),
		// The decoder stops at the alias inside its anchor, once the
		// aliases before it are expanded.
		"lists, then a cycle": bomb(func(i int) string { return fmt.Sprintf("l%d: ", i) }) + "z: &z [*z]\n",
	}
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: &fnv1.State{Composite: &fnv1.Resource{}}}
	for name, spec := range specs {
		outs := map[Codec]string{
			FunctionIO{}: "apiVersion: apiextensions.crossplane.io/v1alpha1\nkind: FunctionIO\ndesired:\n  composite:\n    resource:\n      apiVersion: example.org/v1\n      kind: XR\n      spec:\n" + indent(spec, "        "),
			KRM{}:        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: example.org/v1\n  kind: XR\n  metadata:\n    name: x\n  spec:\n" + indent(spec, "    "),
		}
		outs[JSON{}] = outs[FunctionIO{}] // read as YAML to say which mode it is
		for cd, out := range outs {
			var err error
			bound := decodeBound(cd, []byte(out))
			used := memtest.PeakWithin(bound, func() { _, err = cd.Decode(req, []byte(out)) })
			if err != nil && cd.Name() != "json" && name != "lists, then a cycle" {
				t.Fatalf("%s, %s: %v", cd.Name(), name, err)
			}
			t.Logf("%-10s %-20s %7d bytes: decoding held %10d, bound %10d (%.1fx)", cd.Name(), name, len(out), used, bound, float64(bound)/float64(used))
			if used > bound {
				t.Errorf("%s, %s: decoding held %d bytes, past the bound of %d", cd.Name(), name, used, bound)
			}
		}
	}
}

func indent(lines, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(lines, "\n"), "\n", "\n"+prefix) + "\n"
}
