// Package jsonhttp writes the JSON answers of the admin API and the console.
package jsonhttp

import (
	"encoding/json"
	"net/http"
)

// Reply writes v as a JSON answer with status.
func Reply(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Fail(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	write(w, status, body)
}

// Fail writes the error answer {"error": msg} with status.
func Fail(w http.ResponseWriter, status int, msg string) {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	write(w, status, body)
}

func write(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
