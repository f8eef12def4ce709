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
	// breaks (LF, CR, and NEL, LS and PS, which YAML 1.1 decoders take
	// for line breaks too) and a '-' before a space, a tab, a line break
	// or the end (a block sequence's entry).
	yamlMarks int64
	// opens counts '[', '{' and, in YAML, a sequence's entry that starts
	// another ("- - x"): each nesting level costs the decoders more than a
	// value beside others.
	opens int64
}

func countOutput(out []byte) outCounts {
	c := outCounts{bytes: int64(len(out))}
	for i, b := range out {
		switch b {
		case '[', '{':
			c.opens++
			c.jsonMarks++
			c.yamlMarks++
		case ',', ':':
			c.jsonMarks++
			c.yamlMarks++
		case '\n', '\r':
			c.yamlMarks++
		case 0xC2, 0xE2:
			if n := lineBreakAt(out, i); n > 1 {
				c.yamlMarks++
			}
		case '-':
			if i+1 == len(out) || out[i+1] == ' ' || out[i+1] == '\t' || lineBreakAt(out, i+1) > 0 {
				c.yamlMarks++
				if i >= 2 && out[i-1] == ' ' && out[i-2] == '-' {
					c.opens++ // "- - x": a sequence in a sequence
				}
			}
		}
	}
	return c
}

// lineBreakAt returns the length of the YAML line break at out[i] (LF, CR,
// NEL, LS or PS), or 0.
func lineBreakAt(out []byte, i int) int {
	rest := out[i:]
	switch {
	case len(rest) == 0:
		return 0
	case rest[0] == '\n' || rest[0] == '\r':
		return 1
	case len(rest) >= 2 && rest[0] == 0xC2 && rest[1] == 0x85:
		return 2
	case len(rest) >= 3 && rest[0] == 0xE2 && rest[1] == 0x80 && (rest[2] == 0xA8 || rest[2] == 0xA9):
		return 3
	}
	return 0
}

// DecodeMemory of JSON: protojson decodes into messages and, for the
// resources, structpb values, each of which costs a few hundred bytes
// more than the bytes it was read from; strings are copied. Output that is
// invalid is read again into generic values, to say why, which costs no
// more. Output that is not a JSON object is read as YAML, to say which
// mode it looks like (Sniff): it costs what the YAML modes' output does.
func (JSON) DecodeMemory(out []byte) int64 {
	if !isJSON(out) {
		return yamlDecodeMemory(out)
	}
	c := countOutput(out)
	return decodeBase + jsonDecodeByte*c.bytes + jsonDecodeValue*(c.jsonMarks+1) + nestValue*c.opens
}

// DecodeMemory of FunctionIO: see yamlDecodeMemory.
func (FunctionIO) DecodeMemory(out []byte) int64 { return yamlDecodeMemory(out) }

// DecodeMemory of KRM: see yamlDecodeMemory.
func (KRM) DecodeMemory(out []byte) int64 { return yamlDecodeMemory(out) }

// yamlDecodeMemory is at most what sigs.k8s.io/yaml takes to read an
// output and the codec to build the response from it: YAML nodes, generic
// values, their JSON, and that decoded again, some hundreds of bytes a
// value. Output that may hold aliases is charged too for the parse that
// counts what they add (AliasMemory).
func yamlDecodeMemory(out []byte) int64 {
	c := countOutput(out)
	n := decodeBase + yamlDecodeByte*c.bytes + yamlDecodeValue*(c.yamlMarks+1) + nestValue*c.opens
	if mayHoldAliases(out) {
		n += aliasParseMemory(c)
	}
	return n
}

// aliasParseMemory is at most what the parse that counts aliases holds:
// a yaml.Node of some 200 bytes per value, and 500 to 1,000 more per level
// of nesting (TestAliasParseMemory).
func aliasParseMemory(c outCounts) int64 {
	return aliasParseByte*c.bytes + aliasParseValue*(c.yamlMarks+1) + aliasParseNest*c.opens
}

// AliasCounter is a Codec whose decoding may expand YAML aliases. An alias
// repeats all that its anchor names, each time it is decoded, which only
// a parse can count: AliasMemory is what the values they add take, once
// the parse, which DecodeMemory covers, has been charged.
type AliasCounter interface {
	AliasMemory(stdout []byte) int64
}

// AliasMemory of JSON: output that is not a JSON object is read as YAML.
func (JSON) AliasMemory(out []byte) int64 {
	if isJSON(out) {
		return 0
	}
	return yamlAliasMemory(out)
}

// AliasMemory of FunctionIO: see yamlAliasMemory.
func (FunctionIO) AliasMemory(out []byte) int64 { return yamlAliasMemory(out) }

// AliasMemory of KRM: see yamlAliasMemory.
func (KRM) AliasMemory(out []byte) int64 { return yamlAliasMemory(out) }

func yamlAliasMemory(out []byte) int64 {
	if !mayHoldAliases(out) {
		return 0
	}
	values, bytes := aliasAdds(out)
	return yamlDecodeValue*values + yamlDecodeByte*bytes
}

// mayHoldAliases says whether out may be YAML with an anchor and an alias.
// An anchor may follow nearly anything (a quoted key's colon, a tag, a
// byte order mark), so any '&' and '*' will do: what a false yes costs is
// a parse.
func mayHoldAliases(out []byte) bool {
	return bytes.IndexByte(out, '&') >= 0 && bytes.IndexByte(out, '*') >= 0
}

// aliasAdds is what out's aliases add to it, expanded, as a YAML decoder
// that turns the document into JSON writes it out: each alias as many
// values, and as many bytes of scalars (keys included), as the node it
// names holds, its own aliases expanded. An alias inside the node it
// names adds nothing: the decoder stops there. Nothing if out does not
// parse (an unknown anchor, say): the decoders then refuse it before they
// expand anything.
func aliasAdds(out []byte) (values, scalarBytes int64) {
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		return 0, 0
	}
	type size struct{ values, bytes int64 }
	var plain size
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		plain.values++
		plain.bytes += int64(len(n.Value))
		for _, child := range n.Content {
			count(child)
		}
	}
	count(&doc)
	// sizes memoizes what is under each node, aliases expanded; walking
	// marks a node whose walk has not ended. The walk follows the
	// document's own nesting, which the parse has already been through.
	sizes := map[*yaml.Node]size{}
	walking := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node) size
	walk = func(n *yaml.Node) size {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil || walking[n.Alias] {
				return size{}
			}
			n = n.Alias
		}
		if v, ok := sizes[n]; ok {
			return v
		}
		walking[n] = true
		total := size{1, int64(len(n.Value))}
		for _, child := range n.Content {
			v := walk(child)
			// Saturated: past this no budget holds it anyway.
			total.values = min(total.values+v.values, maxAliasAdds)
			total.bytes = min(total.bytes+v.bytes, maxAliasAdds)
		}
		delete(walking, n)
		sizes[n] = total
		return total
	}
	expanded := walk(&doc)
	return max(0, expanded.values-plain.values), max(0, expanded.bytes-plain.bytes)
}

// The decoding models' constants: upper bounds fitted to what Decode was
// measured to hold for outputs of the costly shapes
// (TestDecodeMemoryBoundsDecode), with a margin of a half or more. A
// string's bytes cost more or less by where its buffers' doublings fall
// and by how much garbage a collection finds still in use when the
// machine is busy (in YAML, 7 to 10 a byte for strings of 0.3 to 1 MB on
// a quiet machine, 17 to 22 under `go test ./...`; in JSON, 1 to 3.6 and
// 8), so the cost per byte has more margin; the base covers what a first
// decode initializes.
const (
	decodeBase      = 128 << 10
	jsonDecodeByte  = 16
	jsonDecodeValue = 350
	yamlDecodeByte  = 40
	yamlDecodeValue = 850
	nestValue       = 600
	aliasParseByte  = 4
	aliasParseValue = 700
	aliasParseNest  = 1500
	maxAliasAdds    = 1 << 40
)
