package codec

import "github.com/ocifn/ocifn/internal/protocount"

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
