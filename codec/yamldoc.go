package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
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
	return yamlv2.Marshal(yamlNumbers(doc))
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
