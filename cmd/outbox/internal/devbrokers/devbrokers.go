// Package devbrokers says what a build without the in-process brokers (build
// tag nodevbrokers, as in the release binaries) leaves out.
package devbrokers

import "fmt"

// Omitted is the error of a developer feature that builds with the tag
// nodevbrokers (the release binaries) leave out: what is missing, and what
// to do instead.
func Omitted(what, instead string) error {
	return fmt.Errorf("%s is not in this build of outbox, which leaves out the in-process brokers (build tag nodevbrokers, as in the release binaries); %s, or build outbox from source with plain 'go build'", what, instead)
}
