// Package tools holds the repository's own tooling: modproxy, which serves the
// modules from a file-based module proxy, and tests that hold the modules to
// the scheme of docs/modules.md (no replace, one go directive, one version of
// every shared dependency, the siblings required at one version) and the
// packages to their import boundaries.
package tools
