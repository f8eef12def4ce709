// Package fronttest holds what the tests of the HTTP fronts share.
package fronttest

import "io"

// CountingReader is a request body of Max bytes (spaces) that counts how
// many were read: a front that must not read a body can be caught at it.
type CountingReader struct{ N, Max int }

func (c *CountingReader) Read(p []byte) (int, error) {
	if c.N >= c.Max {
		return 0, io.EOF
	}
	k := min(len(p), c.Max-c.N)
	for i := range p[:k] {
		p[i] = ' '
	}
	c.N += k
	return k, nil
}
