package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/outboxdriver"
)

// outageDriver is a Driver whose RunInTx fails as a driver reports a
// database it cannot reach.
type outageDriver struct {
	outboxdriver.Store // not used
	err                error
}

func (d outageDriver) InsertTx(context.Context, struct{}, []Message) error { return nil }
func (d outageDriver) MarkConsumedTx(context.Context, struct{}, string, string) (bool, error) {
	return true, nil
}

func (d outageDriver) RunInTx(context.Context, func(context.Context, struct{}) error) error {
	return d.err
}

func TestInboxHandlerPassesOutages(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	h := NewInbox[struct{}](outageDriver{err: DatabaseUnavailable(refused)}).Handler("billing",
		func(context.Context, struct{}, Message) error { return nil })
	err := h(context.Background(), Message{MsgID: "m-1", Topic: "t"})
	switch {
	case !IsUnavailable(err) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, refused):
		t.Errorf("handler error %v: want IsUnavailable, wrapping the driver's error", err)
	case IsPermanent(err):
		t.Errorf("handler error %v is Permanent: the subscriber would dead-letter the message", err)
	case !strings.HasPrefix(err.Error(), "database unavailable: dial tcp"):
		t.Errorf("handler error text %q", err.Error())
	}
}

func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	if DatabaseUnavailable(nil) != nil {
		t.Error("DatabaseUnavailable(nil) is not nil")
	}
	base := errors.New("connection reset by peer")
	err := DatabaseUnavailable(base)
	if !IsUnavailable(err) || !errors.Is(err, base) || err.Error() != "database unavailable: connection reset by peer" {
		t.Errorf("DatabaseUnavailable: %v", err)
	}
	if DatabaseUnavailable(err) != err || Unavailable(err) != err {
		t.Error("wrapping an Unavailable error again changed it")
	}
	if got := Unavailable(base).Error(); got != "broker unavailable: connection reset by peer" {
		t.Errorf("Unavailable's text is %q", got)
	}
}
