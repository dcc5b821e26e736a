package main

import (
	"context"
	"errors"
	"io"
)

// runDemo runs `outbox demo`. Owned by the demo/bench author; being written.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: being written")
}
