package brokerconf

import "fmt"

// Error is a configuration error of one adapter: a bad URL, query parameter
// or config field. Its text starts with the package name and says what to
// fix; errors.Is(err, Sentinel) holds, so that callers test one sentinel per
// adapter (ErrConfig).
type Error struct {
	// Pkg is the adapter's package name, e.g. "outboxkafka".
	Pkg string
	// Msg says what is wrong and what to do.
	Msg string
	// Sentinel is the adapter's ErrConfig.
	Sentinel error
}

func (e *Error) Error() string { return e.Pkg + ": " + e.Msg }

// Is reports whether target is the adapter's sentinel.
func (e *Error) Is(target error) bool { return target == e.Sentinel }

// Errorf returns the constructor of an adapter's configuration errors.
func Errorf(pkg string, sentinel error) func(format string, args ...any) error {
	return func(format string, args ...any) error {
		return &Error{Pkg: pkg, Msg: fmt.Sprintf(format, args...), Sentinel: sentinel}
	}
}
