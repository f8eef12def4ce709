package codec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// oneDocument refuses YAML output that holds more than one document: the
// YAML modes read the first one alone, and whatever followed would be
// dropped without a word.
func oneDocument(out []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	seen := false
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if emptyDocument(doc) {
			continue
		}
		if seen {
			return fmt.Errorf("it holds more than one YAML document, and the second, which begins %s, would be ignored; print one", QuoteHead(bytes.TrimSpace(doc)))
		}
		seen = true
	}
}

// emptyDocument says whether a document holds nothing but blank lines,
// comments and markers.
func emptyDocument(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) && !bytes.Equal(line, []byte("...")) {
			return false
		}
	}
	return true
}
