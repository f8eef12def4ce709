package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"
)

// marshalYAML is what the YAML modes send the function: v as YAML, as
// sigs.k8s.io/yaml's Marshal writes it, but without its one loss. That
// Marshal writes v as JSON and parses the JSON back as YAML 1.1 before it
// writes YAML; JSON leaves a NEL (U+0085) unescaped, and to YAML 1.1 a NEL
// is a line break, which a quoted scalar folds into a space. Read as JSON,
// the string keeps it, and the YAML writer escapes it ("\N"). Numbers get
// the types YAML would have read them as, so that an integer is written as
// one.
func marshalYAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return nil, err
	}
	// In JSON, "<<": is that key and nothing else (json.Marshal escapes
	// "<" as \u003c): most requests have none, and their YAML is not
	// parsed again. Asked here, so that the JSON is not kept while the
	// YAML is written.
	mergeKey := bytes.Contains(j, []byte(`"\u003c\u003c":`)) || bytes.Contains(j, []byte(`"<<":`))
	out, err := yamlv2.Marshal(yamlNumbers(doc))
	if err != nil {
		return nil, err
	}
	if mergeKey {
		out = quoteMergeKeys(out)
	}
	return out, nil
}

// MarshalYAML writes v as YAML as the YAML modes write what they send
// the function (keys sorted, as sigs.k8s.io/yaml's Marshal writes them),
// for YAML that every reader reads back as v.
func MarshalYAML(v any) ([]byte, error) { return marshalYAML(v) }

// quoteMergeKeys returns out, YAML that go.yaml.in/yaml/v2 wrote, with
// each key "<<" double-quoted. The writer leaves that key plain, and the
// YAML readers a function may use (go-yaml v2 and v3, so kyaml, and yq)
// take a plain "<<" key for a merge key: a ConfigMap's data key "<<" is
// merged away, or, when its value is no object, refused; kyaml prints it
// back as "!!merge <<", which ocifn then cannot read.
func quoteMergeKeys(out []byte) []byte {
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(out, &root); err != nil {
		return out
	}
	lines := lineStarts(out)
	var at []int // byte offsets of the keys to quote
	var walk func(n *yamlv3.Node)
	walk = func(n *yamlv3.Node) {
		for i, c := range n.Content {
			if n.Kind == yamlv3.MappingNode && i%2 == 0 && c.Kind == yamlv3.ScalarNode && c.Style == 0 && c.Value == "<<" && c.Line >= 1 && c.Line <= len(lines) {
				if off := advanceColumns(out, lines[c.Line-1], c.Column-1); bytes.HasPrefix(out[off:], []byte("<<")) {
					at = append(at, off)
				}
				continue
			}
			walk(c)
		}
	}
	walk(&root)
	if len(at) == 0 {
		return out
	}
	return quoteAt(out, at, func([]byte) int { return len("<<") })
}

// quoteAt returns doc with the word at each offset in at double-quoted,
// wordLen saying how long the word that begins a slice is.
func quoteAt(doc []byte, at []int, wordLen func([]byte) int) []byte {
	sort.Ints(at)
	out := make([]byte, 0, len(doc)+2*len(at))
	prev := 0
	for _, off := range at {
		end := off + wordLen(doc[off:])
		out = append(out, doc[prev:off]...)
		out = append(out, '"')
		out = append(out, doc[off:end]...)
		out = append(out, '"')
		prev = end
	}
	return append(out, doc[prev:]...)
}

// yamlNumbers replaces, in place, each json.Number in v with the int64,
// uint64 or float64 YAML reads its text as.
func yamlNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = yamlNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = yamlNumbers(e)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(t), 10, 64); err == nil {
			return u
		}
		f, _ := strconv.ParseFloat(string(t), 64) // json.Marshal wrote it from a float64
		return f
	}
	return v
}

// oneDocument returns what of YAML output to decode: its one document, or
// an error when it holds more than one, since the YAML modes' decoder reads
// the first alone and whatever followed would be dropped without a word.
//
// Documents are told apart as the decoder does, by the YAML specification:
// a line that begins with "---" or "..." followed by a space, a tab or its
// end is a marker wherever it is (no scalar may hold one), "---" starting a
// document and "..." ending one; content after "..." starts another
// without a marker; a "%" line between documents is a directive, not
// content. Documents that hold nothing (a stray "---", comments) are
// allowed; when one comes before the document that does, the decoder would
// read it alone, so the output is returned with the lines before the
// content's document blanked (their line breaks kept, so that the
// decoder's line numbers still point into the output).
func oneDocument(out []byte) ([]byte, error) {
	type doc struct {
		start   int // where it begins (its directives, marker or content)
		content int // where its content begins, -1 for none
		line    int // the line of its content, from 1
	}
	var docs []doc
	open := false  // a document has begun and not ended
	dirStart := -1 // the first directive line of the coming document
	lineNo := 0    // of the line at off, from 1
	for off := 0; off < len(out); {
		lineNo++
		end, next := lineEnd(out, off)
		l := out[off:end]
		if off == 0 {
			l = bytes.TrimPrefix(l, []byte("\uFEFF")) // a byte order mark starts the stream, not a line
		}
		switch {
		case isMarker(l, "---"):
			start := off
			if dirStart >= 0 {
				start, dirStart = dirStart, -1
			}
			docs = append(docs, doc{start: start, content: -1})
			open = true
			if hasContent(l[3:]) {
				docs[len(docs)-1].content, docs[len(docs)-1].line = off, lineNo
			}
		case isMarker(l, "..."):
			open = false
		case !open && len(l) > 0 && l[0] == '%':
			if dirStart < 0 {
				dirStart = off
			}
		case hasContent(l):
			if !open {
				docs = append(docs, doc{start: off, content: -1})
				open = true
			}
			if d := &docs[len(docs)-1]; d.content < 0 {
				d.content, d.line = off, lineNo
			}
		}
		off = next
	}
	first := -1
	for i, d := range docs {
		if d.content < 0 {
			continue
		}
		if first < 0 {
			first = i
			continue
		}
		rest := out[d.content:]
		if i+1 < len(docs) {
			rest = out[d.content:docs[i+1].start]
		}
		return nil, fmt.Errorf("it holds more than one YAML document, and the second, at line %d, which begins %s, would be ignored; print one", d.line, QuoteHead(bytes.TrimSpace(rest)))
	}
	if first <= 0 {
		return out, nil
	}
	// An empty document comes first: blank what precedes the content's.
	blanked := make([]byte, 0, len(out))
	for off := 0; off < docs[first].start; {
		end, next := lineEnd(out, off)
		if end < next {
			blanked = append(blanked, '\n')
		}
		off = next
	}
	return append(blanked, out[docs[first].start:]...), nil
}

// lineEnd returns where the line at off ends and where the next begins:
// YAML breaks lines at LF, CR, CRLF, and (1.1, as the decoder reads it)
// NEL, LS and PS.
func lineEnd(out []byte, off int) (end, next int) {
	for i := off; i < len(out); i++ {
		if n := lineBreakAt(out, i); n > 0 {
			if out[i] == '\r' && i+1 < len(out) && out[i+1] == '\n' {
				n = 2
			}
			return i, i + n
		}
	}
	return len(out), len(out)
}

// isMarker says whether line is the document marker m ("---" or "...").
func isMarker(line []byte, m string) bool {
	return bytes.HasPrefix(line, []byte(m)) && (len(line) == 3 || line[3] == ' ' || line[3] == '\t')
}

// hasContent says whether a line holds more than blanks and a comment.
func hasContent(line []byte) bool {
	line = bytes.TrimLeft(line, " \t")
	return len(line) > 0 && line[0] != '#'
}

// yaml11Bools are the plain scalars that YAML 1.1, as the YAML modes'
// decoder reads, takes for booleans, and YAML 1.2 (kyaml, yq) for strings.
// true and false, booleans to both, are not among them.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"n": true, "N": true, "no": true, "No": true, "NO": true,
	"on": true, "On": true, "ON": true,
	"off": true, "Off": true, "OFF": true,
}

// quoteYAML11Bools returns doc with each plain scalar of yaml11Bools, as a
// value or a key, double-quoted, so that a YAML 1.1 decoder reads it as
// the string YAML 1.2 makes of it. A KRM function's output is written to
// be read by kyaml (YAML 1.2): yq and kyaml print the string "on" plain,
// which YAML 1.1 would turn into true, and a key "y" into "true". doc is
// returned as it is when it holds no such scalar, or does not parse (the
// decoder then says why).
func quoteYAML11Bools(doc []byte) []byte {
	if !mayHoldYAML11Bool(doc) {
		return doc
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil {
		return doc
	}
	lines := lineStarts(doc)
	var found []*yamlv3.Node
	var walk func(n *yamlv3.Node)
	walk = func(n *yamlv3.Node) {
		if n.Kind == yamlv3.ScalarNode {
			if n.Style == 0 && n.Tag == "!!str" && yaml11Bools[n.Value] && n.Line >= 1 && n.Line <= len(lines) && n.Column >= 1 {
				found = append(found, n)
			}
			return
		}
		// An alias is walked where its anchor is: walking it again
		// would quote nothing new, however often it repeats.
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	// Each scalar's offset is counted from the one before it on its line,
	// not from the line's start, which on one long line (flow or
	// JSON-like YAML) would take time quadratic in its length.
	sort.Slice(found, func(i, j int) bool {
		return found[i].Line < found[j].Line || found[i].Line == found[j].Line && found[i].Column < found[j].Column
	})
	var at []int // byte offsets of the scalars to quote, in document order
	line, column, off := 0, 0, 0
	for _, n := range found {
		if n.Line != line {
			line, column, off = n.Line, 1, lines[n.Line-1]
		}
		off = advanceColumns(doc, off, n.Column-column)
		column = n.Column
		start := off
		if n.Anchor != "" {
			// The node begins at its anchor: the scalar follows,
			// on the same line or, past comments, a later one.
			start = skipSeparation(doc, off+len("&")+len(n.Anchor))
		}
		// Only the word itself is quoted, never part of another.
		if start < len(doc) && plainWordLen(doc[start:]) == len(n.Value) && bytes.HasPrefix(doc[start:], []byte(n.Value)) && (start == 0 || !isLetter(doc[start-1])) {
			at = append(at, start)
		}
	}
	if len(at) == 0 {
		return doc
	}
	return quoteAt(doc, at, plainWordLen)
}

// lineStarts is where each line of doc begins, counting the line breaks
// the YAML parser counts.
func lineStarts(doc []byte) []int {
	lines := []int{0}
	for off := 0; off < len(doc); {
		_, next := lineEnd(doc, off)
		if next < len(doc) {
			lines = append(lines, next)
		}
		off = next
	}
	if bytes.HasPrefix(doc, []byte("\uFEFF")) {
		lines[0] = len("\uFEFF") // the parser does not count the byte order mark
	}
	return lines
}

// skipSeparation is off moved past the spaces, tabs, line breaks and
// comments there.
func skipSeparation(doc []byte, off int) int {
	for off < len(doc) {
		switch {
		case doc[off] == ' ' || doc[off] == '\t':
			off++
		case doc[off] == '#':
			off, _ = lineEnd(doc, off)
		case lineBreakAt(doc, off) > 0:
			_, off = lineEnd(doc, off)
		default:
			return off
		}
	}
	return off
}

// advanceColumns is off moved n characters (columns, as the parser counts
// them) on.
func advanceColumns(doc []byte, off, n int) int {
	for ; n > 0 && off < len(doc); n-- {
		_, size := utf8.DecodeRune(doc[off:])
		off += size
	}
	return off
}

// plainWordLen is the length of the ASCII letters b begins with.
func plainWordLen(b []byte) int {
	n := 0
	for n < len(b) && isLetter(b[n]) {
		n++
	}
	return n
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// mayHoldYAML11Bool says, without parsing, whether doc may hold a plain
// scalar of yaml11Bools: a word of them that begins a scalar (after a line
// break, the byte order mark or indentation, "- ", ": ", "? ", "[", "{",
// ",", or a ":" that follows a quoted key or a flow collection, as in
// {"a":on}) and ends one (before a line break, ": ", ",", "]", "}", " #"
// or the end). Line breaks are YAML 1.1's, NEL, LS and PS among them. Most
// output holds none and is not parsed twice.
func mayHoldYAML11Bool(doc []byte) bool {
	for i := 0; i < len(doc); {
		if !isLetter(doc[i]) {
			i++
			continue
		}
		j := i + plainWordLen(doc[i:])
		if yaml11Bools[string(doc[i:j])] && beginsScalar(doc, i) && endsScalar(doc, j) {
			return true
		}
		i = j
	}
	return false
}

func beginsScalar(doc []byte, i int) bool {
	k := i
	for k > 0 && (doc[k-1] == ' ' || doc[k-1] == '\t') {
		k--
	}
	// The parser skips the byte order mark that starts the stream, and
	// one more after it.
	if k == 0 || endsWithBreak(doc[:k]) || bytes.Equal(doc[:k], []byte("\uFEFF")) || bytes.Equal(doc[:k], []byte("\uFEFF\uFEFF")) {
		return true
	}
	// After an anchor, "&a on": where the anchor begins.
	a := 0
	if l := bytes.LastIndexAny(doc[:k], " \t\n\r[{,\u0085\u2028\u2029"); l >= 0 {
		_, size := utf8.DecodeRune(doc[l:])
		a = l + size
	}
	if a < k && doc[a] == '&' && k < i {
		return beginsScalar(doc, a)
	}
	switch doc[k-1] {
	case '\n', '\r', '[', '{', ',':
		return true
	case '-', '?':
		return k < i // "-on" is a scalar of its own
	case ':':
		// "a:on" is a scalar of its own, but a quoted key or a flow
		// collection may be followed by ":" and its value at once.
		return k < i || k >= 2 && bytes.IndexByte([]byte(`"']}`), doc[k-2]) >= 0
	}
	return false
}

func endsScalar(doc []byte, j int) bool {
	k := j
	for k < len(doc) && (doc[k] == ' ' || doc[k] == '\t') {
		k++
	}
	if k == len(doc) || lineBreakAt(doc, k) > 0 {
		return true
	}
	switch doc[k] {
	case ',', ']', '}':
		return true
	case '#':
		return k > j
	case ':':
		return k+1 == len(doc) || doc[k+1] == ' ' || doc[k+1] == '\t' || lineBreakAt(doc, k+1) > 0
	}
	return false
}

// endsWithBreak says whether b ends with a line break.
func endsWithBreak(b []byte) bool {
	for _, n := range []int{1, 2, 3} {
		if len(b) >= n && lineBreakAt(b, len(b)-n) == n {
			return true
		}
	}
	return false
}

// resultsOf reads the results of doc, a YAML mode's answer that cannot
// be read as a whole, one by one and strictly, as T: the list at its
// top-level key "results" (or at "items", else "results", of the object
// there, as older ResourceLists hold it). unreadable says whether some result could not
// be read. An item or a resource the function got wrong does not hide
// what it reported, often the reason for what it printed.
func resultsOf[T any](doc []byte) (rs []T, unreadable bool) {
	if !bytes.Contains(doc, []byte("results")) {
		return nil, false
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil || len(root.Content) != 1 {
		return nil, false
	}
	list := field(root.Content[0], "results")
	if list != nil && list.Kind == yamlv3.MappingNode {
		wrapped := list
		if list = field(wrapped, "items"); list == nil {
			list = field(wrapped, "results")
		}
	}
	if list == nil || list.Kind != yamlv3.SequenceNode {
		return nil, list != nil
	}
	// Each result is decoded on its own, so that one that cannot be
	// read does not hide the others; but where they hold aliases, the
	// decoder's guard against their expansion sees only one result at a
	// time, and a thousand results aliasing one large list passed it,
	// taking seconds of CPU. Then they are decoded as one, under the
	// guard.
	values := make([]any, len(list.Content))
	if hasAlias(list) {
		if err := list.Decode(&values); err != nil || len(values) != len(list.Content) {
			return nil, true
		}
	}
	for i, n := range list.Content {
		v := values[i]
		var r T
		var err error
		if v == nil {
			err = n.Decode(&v)
		}
		var b []byte
		if err == nil {
			b, err = json.Marshal(v)
		}
		if err == nil {
			err = strictJSON(b, &r)
		}
		if err != nil {
			unreadable = true
			continue
		}
		rs = append(rs, r)
	}
	return rs, unreadable
}

// hasAlias says whether n or a node below it is an alias.
func hasAlias(n *yamlv3.Node) bool {
	if n.Kind == yamlv3.AliasNode {
		return true
	}
	for _, c := range n.Content {
		if hasAlias(c) {
			return true
		}
	}
	return false
}

// field is the value of key in the mapping n; nil when there is none.
func field(n *yamlv3.Node, key string) *yamlv3.Node {
	if n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			if v.Kind == yamlv3.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}
