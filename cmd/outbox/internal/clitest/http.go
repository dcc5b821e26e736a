package clitest

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// Scrape gets url and returns the body, failing t unless it answers 200.
func Scrape(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("Scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Scrape %s: %s, %v\n%s", url, resp.Status, err, body)
	}
	return string(body)
}
