package front

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// unreadable is a body that fails the test if it is read.
type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, errors.New("read")
}

func (unreadable) Close() error { return nil }

// TestReadBodyRefusesAnnouncedSize: a body whose Content-Length is over
// the limit is refused before any of it is read, so that net/http never
// asks a client waiting on Expect: 100-continue to send it.
func TestReadBodyRefusesAnnouncedSize(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body, r.ContentLength = unreadable{t}, 2000
	_, bad := ReadBody(httptest.NewRecorder(), r, 1000, 0)
	if bad == nil || bad.Status != http.StatusRequestEntityTooLarge || !strings.Contains(bad.Msg, "Content-Length is 2000") {
		t.Errorf("ReadBody: %v, want 413 naming the Content-Length", bad)
	}
}

// TestReadBodyChargedToNoBudget: ReadBody, which charges no budget (a nil
// Memory, as Memory's methods take), reads a body with a Content-Length.
// It dereferenced the nil Memory to credit the copies charged ahead, and
// panicked on every body that announced its length.
func TestReadBodyChargedToNoBudget(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("hello"))
	body, bad := ReadBody(httptest.NewRecorder(), r, 1000, 0)
	if bad != nil || string(body) != "hello" {
		t.Errorf("ReadBody: %q, %v, want the body", body, bad)
	}
}

// TestReadBodyCutShort: a body that ends before it is whole is refused
// with 400 saying how it was sent: before its Content-Length, or, sent in
// chunks, before its last chunk. A chunked one was said to end "before its
// Content-Length of -1 bytes".
func TestReadBodyCutShort(t *testing.T) {
	said := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, bad := ReadBody(w, r, 1000, 0)
		if bad == nil {
			said <- "no error"
			return
		}
		said <- fmt.Sprintf("%d %s", bad.Status, bad.Msg)
	}))
	defer srv.Close()
	for _, tc := range []struct{ head, body, want string }{
		{"Content-Length: 100", "0123456789", "400 cannot read the request body: it ended before its Content-Length of 100 bytes"},
		{"Transfer-Encoding: chunked", "5\r\nabcde\r\n", "400 cannot read the request body: it ended after 5 bytes, before its last chunk (Transfer-Encoding: chunked)"},
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: fn\r\n%s\r\n\r\n%s", tc.head, tc.body)
		conn.(*net.TCPConn).CloseWrite()
		if got := <-said; got != tc.want {
			t.Errorf("%s, the connection closed after %q: %q, want %q", tc.head, tc.body, got, tc.want)
		}
		conn.Close()
	}
}
