// Package fronttest holds what the tests of the HTTP fronts share.
package fronttest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

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

// StalledBody sends the server at addr a POST whose headers (header lines,
// each ending in CRLF) announce a body of 100 bytes, sends 3 of them and
// nothing more, and returns the status and body of the answer, which must
// come within 5 s.
func StalledBody(t testing.TB, addr, headers string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\n"+headers+"Content-Length: 100\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	rsp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer rsp.Body.Close()
	msg, _ := io.ReadAll(rsp.Body)
	return rsp.StatusCode, string(msg)
}

// Says fails t, without stopping it, for each of wants that text (what,
// such as a log line or an answer's body) does not contain.
func Says(t testing.TB, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s %q does not say %q", what, text, want)
		}
	}
}
