package adaptor

import (
	"bytes"
	"errors"
)

// errOutputLimit stops the copy of a function's stdout past its cap; the
// function then gets EPIPE.
var errOutputLimit = errors.New("stdout limit reached")

// cappedBuffer collects stdout up to max bytes. The buffer is a field, not
// embedded: an embedded bytes.Buffer would lend its ReadFrom and WriteString
// to io.Copy and io.WriteString, which would bypass the cap.
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.overflow = true
		return 0, errOutputLimit
	}
	return c.buf.Write(p)
}

// Bytes returns what was collected.
func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }
