package main

import (
	"context"
	"errors"
	"io"
)

// runBench runs `outbox bench`. Owned by the demo/bench author; being written.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench: being written")
}
