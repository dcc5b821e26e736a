package sqlstore

// Handle lets this repository's own code (the drivers, their tests,
// drivertest, cmd/outbox) reach the Store under a driver, and the calls
// only tests and the bench need (Truncate, the Explain plans), without the
// driver exporting them. A driver embeds a Handle through an unexported
// alias,
//
//	type engine = sqlstore.Handle
//
// which keeps it out of the driver's godoc and method set (a Handle has no
// exported method), and Of finds it in the driver, or in a type that
// embeds the driver.
type Handle struct {
	s *Store
	d *SQLDriver
}

// HandleOf returns the Handle of s.
func HandleOf(s *Store) Handle { return Handle{s: s} }

// HandleOfSQL returns the Handle of d and its Store.
func HandleOfSQL(d *SQLDriver) Handle { return Handle{s: d.Store, d: d} }

func (h Handle) engine() Handle { return h }

type engine interface{ engine() Handle }

// Of returns the Store under v, a driver of this repository; ok is false
// for any other value.
func Of(v any) (s *Store, ok bool) {
	switch v := v.(type) {
	case *Store:
		return v, true
	case *SQLDriver:
		return v.Store, true
	}
	e, ok := v.(engine)
	if !ok {
		return nil, false
	}
	return e.engine().s, true
}

// SQLOf returns the SQLDriver under v, a database/sql driver of this
// repository; ok is false for any other value.
func SQLOf(v any) (d *SQLDriver, ok bool) {
	if d, ok := v.(*SQLDriver); ok {
		return d, true
	}
	e, ok := v.(engine)
	if !ok || e.engine().d == nil {
		return nil, false
	}
	return e.engine().d, true
}
