package codec

import (
	"bytes"

	"go.yaml.in/yaml/v3"

	"github.com/ocifn/ocifn/internal/protocount"
)

// The models below are upper bounds fitted to the memory each encoder was
// measured to take (TestEncodeMemoryBoundsEncode) for requests of the
// shapes that cost most per byte on the wire, with a margin of a quarter
// or more over the most measured in several runs. Counted with the wire
// bytes and the decoded request, they are loose by up to about 8 times
// for shapes that cost little.

// EncodeMemory of JSON: protojson writes an output of about jsonSize
// bytes, growing its buffer by doubling, and the states are spliced into
// a copy; maps are sorted, which allocates per entry.
func (JSON) EncodeMemory(c protocount.Counts) int64 {
	return 5*jsonSize(c) + 64*(c.Messages+c.Strings)
}

// jsonSize is at most the length of a message's protojson, weighted by
// what each part costs to write: each string quoted, with its control
// characters escaped (6 bytes, as in \u0001, and garbage of the escaping's
// own) and its quotes (2), and bytes values in base64 (4/3); each number
// at most 24 characters; each message its braces, a key or a comma.
func jsonSize(c protocount.Counts) int64 {
	return c.StringBytes + c.BytesLen/3 + 10*c.Controls + 3*c.Quotes + 4*c.Strings + 25*c.Scalars + 8*c.Messages
}

// EncodeMemory of FunctionIO: see yamlMemory.
func (FunctionIO) EncodeMemory(c protocount.Counts) int64 { return yamlMemory(c) }

// EncodeMemory of KRM: see yamlMemory.
func (KRM) EncodeMemory(c protocount.Counts) int64 { return yamlMemory(c) }

// yamlMemory is at most what sigs.k8s.io/yaml takes to write a request as
// YAML: it marshals to JSON, decodes that into generic values, builds YAML
// nodes and emits them, so each value costs some hundreds of bytes, a
// connection detail (a name and a value in FunctionIO) more, a string's
// bytes about ten times their length, and a nested value its indentation.
func yamlMemory(c protocount.Counts) int64 {
	return 800*(c.Messages+c.Scalars+c.Strings) + 1600*c.Bytes +
		12*(c.StringBytes+c.NonASCII) + 8*c.Quotes + 48*c.Controls + c.Indent
}

// outCounts are what bounds the memory that decoding a function's output
// takes, counted from its bytes alone, before it is parsed.
type outCounts struct {
	bytes int64
	// jsonMarks counts the bytes a JSON value may follow: , : [ and {.
	// Every value but the first follows one, so JSON output holds at most
	// jsonMarks+1 values (a key counted as one).
	jsonMarks int64
	// yamlMarks counts what a YAML value may follow: those bytes, line
	// feeds, and a '-' before a space, a line feed or the end (a block
	// sequence's entry).
	yamlMarks int64
	// aliases counts '*', which may begin a YAML alias.
	aliases int64
}

func countOutput(out []byte) outCounts {
	c := outCounts{bytes: int64(len(out))}
	for i, b := range out {
		switch b {
		case ',', ':', '[', '{':
			c.jsonMarks++
			c.yamlMarks++
		case '\n':
			c.yamlMarks++
		case '-':
			if i+1 == len(out) || out[i+1] == ' ' || out[i+1] == '\n' || out[i+1] == '\r' || out[i+1] == '\t' {
				c.yamlMarks++
			}
		case '*':
			c.aliases++
		}
	}
	return c
}

// DecodeMemory of JSON: protojson decodes into messages and, for the
// resources, structpb values, each of which costs some hundred bytes
// more than the bytes it was read from; strings are copied.
func (JSON) DecodeMemory(out []byte) int64 {
	c := countOutput(out)
	return decodeBase + jsonDecodeByte*c.bytes + jsonDecodeValue*(c.jsonMarks+1)
}

// DecodeMemory of FunctionIO: see yamlDecodeMemory.
func (FunctionIO) DecodeMemory(out []byte) int64 { return yamlDecodeMemory(out) }

// DecodeMemory of KRM: see yamlDecodeMemory.
func (KRM) DecodeMemory(out []byte) int64 { return yamlDecodeMemory(out) }

// yamlDecodeMemory is at most what sigs.k8s.io/yaml takes to read an
// output and the codec to build the response from it: YAML nodes, generic
// values, their JSON, and that decoded again, some hundreds of bytes a
// value. An alias repeats all that its anchor names, each time: output
// that may hold one is charged for the values its aliases add.
func yamlDecodeMemory(out []byte) int64 {
	c := countOutput(out)
	n := decodeBase + yamlDecodeByte*c.bytes + yamlDecodeValue*(c.yamlMarks+1)
	if c.aliases > 0 && bytes.IndexByte(out, '&') >= 0 {
		n += yamlDecodeValue * aliasValues(out)
	}
	return n
}

// yamlAliasCap is how many values aliases may add before the YAML decoder
// stops a document: go.yaml.in/yaml/v2 allows a share of the values it
// decodes to come from aliases that falls from 99% at 400,000 values to
// 10% at 4,000,000, at most about 1.2 million of them.
const yamlAliasCap = 1_250_000

// aliasValues is how many values out's aliases add to it, expanded, as a
// YAML decoder counts them; yamlAliasCap if it cannot tell. It parses out
// into nodes, which take no more than decoding it without aliases does.
func aliasValues(out []byte) int64 {
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return yamlAliasCap
	}
	var plain, expanded int64
	seen := map[*yaml.Node]int64{}
	var walk func(n *yaml.Node, depth int) (int64, bool)
	walk = func(n *yaml.Node, depth int) (int64, bool) {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return 0, false
			}
			return walk(n.Alias, depth)
		}
		if v, ok := seen[n]; ok {
			// -1 marks a node being walked: an alias inside what it names.
			return v, v >= 0
		}
		if depth > 10000 {
			return 0, false
		}
		seen[n] = -1
		total := int64(1)
		for _, child := range n.Content {
			v, ok := walk(child, depth+1)
			if !ok {
				return 0, false
			}
			total += v
			if total > yamlAliasCap*2 {
				return 0, false
			}
		}
		seen[n] = total
		return total, true
	}
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		plain++
		for _, child := range n.Content {
			count(child)
		}
	}
	count(&doc)
	expanded, ok := walk(&doc, 0)
	if !ok || expanded-plain > yamlAliasCap {
		return yamlAliasCap
	}
	return expanded - plain
}

// The decoding models' constants: upper bounds fitted to what Decode was
// measured to hold for outputs of the costly shapes
// (TestDecodeMemoryBoundsDecode), with a margin of a quarter or more. A
// string's bytes cost more or less by where its buffers' doublings fall
// (7 to 10 a byte in YAML for strings of 0.3 to 1 MB), so the cost per
// byte has more margin; the base covers what a first decode initializes.
const (
	decodeBase      = 128 << 10
	jsonDecodeByte  = 4
	jsonDecodeValue = 300
	yamlDecodeByte  = 16
	yamlDecodeValue = 700
)
