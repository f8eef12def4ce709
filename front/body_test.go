package front

import (
	"errors"
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
