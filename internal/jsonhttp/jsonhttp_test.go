package jsonhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestReplyAndFail(t *testing.T) {
	w := httptest.NewRecorder()
	Reply(w, http.StatusOK, map[string]int{"n": 1})
	if w.Code != 200 || w.Body.String() != "{\"n\":1}\n" || w.Header().Get("Content-Type") != "application/json; charset=utf-8" ||
		w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("Reply: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	w = httptest.NewRecorder()
	Reply(w, http.StatusOK, func() {})
	if w.Code != http.StatusInternalServerError {
		t.Errorf("Reply of a value JSON cannot encode: %d, want 500", w.Code)
	}
	w = httptest.NewRecorder()
	Fail(w, http.StatusNotFound, `no "m-1"`)
	if w.Code != 404 || w.Body.String() != "{\"error\":\"no \\\"m-1\\\"\"}\n" {
		t.Errorf("Fail: %d %q", w.Code, w.Body.String())
	}
}
