package main

import "fmt"

// errOmitted is the error of a developer feature that builds with the tag
// nodevbrokers (the release binaries) leave out: what is missing, and what
// to do instead.
func errOmitted(what, instead string) error {
	return fmt.Errorf("%s is not in this build of outbox, which leaves out the in-process brokers (build tag nodevbrokers, as in the release binaries); %s, or build outbox from source with plain 'go build'", what, instead)
}
