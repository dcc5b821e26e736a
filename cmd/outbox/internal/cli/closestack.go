package cli

// CloseStack holds what a command opened, to be closed in the reverse
// order, as defers would close it.
type CloseStack []func()

// Push adds fn, to be called before everything pushed earlier.
func (s *CloseStack) Push(fn func()) { *s = append(*s, fn) }

// Close calls the functions pushed, the last first, and forgets them.
func (s *CloseStack) Close() {
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i]()
	}
	*s = nil
}
