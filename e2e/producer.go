package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

type transfer struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// produce runs this producer's share of the business transactions: each
// debits an account and writes its message in the same transaction; every
// tenth rolls back after writing.
func (h *harness) produce(ctx context.Context, t *testing.T, p int) {
	for i := p; i < transactions; i += producers {
		id := fmt.Sprintf("%s-tx-%04d", h.b.Name, i)
		acct := fmt.Sprintf("acct-%d", i%7)
		payload, _ := json.Marshal(transfer{Account: acct, Amount: i + 1})
		m := outbox.Message{MsgID: id, Topic: h.b.Topic, Key: acct, Payload: payload, Headers: map[string]string{"producer": fmt.Sprint(p)}}
		if err := h.record(id, transfer{Account: acct, Amount: i + 1}, h.transferTx(ctx, m, acct, i+1, i%10 == 9)); err != nil {
			t.Errorf("business transaction %s: %v", id, err)
			return
		}
		if i%50 == 0 {
			time.Sleep(20 * time.Millisecond) // spread the load over the run
		}
	}
}

var errRollback = errors.New("e2e: business rule says roll back")

// debitSQL is the business change of every PostgreSQL producer transaction.
const debitSQL = `UPDATE accounts SET balance = balance - $1 WHERE id = $2`

// transferTx runs one business transaction on the PostgreSQL producer: it
// debits acct by amount and writes m, then commits, or, when rollback,
// returns errRollback after writing. The commit does not follow ctx, so that
// no transaction is left in doubt when ctx ends. Half the transactions
// write m with Writer.Write (amount/2 odd: 2, 3, 6, 7, 10, 11, ...); the
// others go through WriteOnCommit, which sends the insert with the COMMIT.
// Each way gets rolled-back transactions (amounts 10, 30, ... and 20, 40, ...
// in the runs, where every tenth rolls back).
func (h *harness) transferTx(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool) error {
	if (amount/2)%2 == 1 {
		return h.heldTransferTx(ctx, m, acct, amount, rollback, 0)
	}
	return h.producer.WriteOnCommit(context.WithoutCancel(ctx), h.writer, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		if _, err := tx.Exec(ctx, debitSQL, amount, acct); err != nil {
			return nil, err
		}
		if rollback {
			return []outbox.Message{m}, errRollback
		}
		return []outbox.Message{m}, nil
	})
}

// heldTransferTx is transferTx, except that with hold > 0 it writes m first,
// so that the transaction holds its row's id before anything else, and
// stays open for hold (holding no row lock: the account is debited after)
// while rows with higher ids commit.
func (h *harness) heldTransferTx(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool, hold time.Duration) error {
	return pgx.BeginFunc(context.WithoutCancel(ctx), h.pool, func(tx pgx.Tx) error {
		debit := func() error {
			_, err := tx.Exec(ctx, debitSQL, amount, acct)
			return err
		}
		if hold == 0 {
			if err := debit(); err != nil {
				return err
			}
		}
		if err := h.writer.Write(ctx, tx, m); err != nil {
			return err
		}
		if hold > 0 {
			time.Sleep(hold)
			if err := debit(); err != nil {
				return err
			}
		}
		if rollback {
			return errRollback
		}
		return nil
	})
}

// record notes how business transaction id, which wrote tr, ended: committed
// (err nil) or rolled back (errRollback); any other error is returned.
func (h *harness) record(id string, tr transfer, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.committed[id] = true
		h.expected[id] = tr
	case errors.Is(err, errRollback):
		h.rolledBack[id] = true
	default:
		return err
	}
	return nil
}

func (h *harness) committedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.committed))
	for id := range h.committed {
		ids = append(ids, id)
	}
	return ids
}

// msgNumber returns the number at the end of a msg_id, or -1.
func msgNumber(msgID string) int {
	n, err := strconv.Atoi(msgID[strings.LastIndex(msgID, "-")+1:])
	if err != nil {
		return -1
	}
	return n
}

// handler applies a transfer through the inbox: the credit and the inbox
// record commit together. The first delivery of every 25th message fails
// before the inbox, so the broker's redelivery is part of every run; the
// change of another fails after its insert, inside the inbox's transaction,
// and the transaction of another fails at its commit (faultyInbox): the
// inbox must leave no record of either, so that the redelivery applies it.
// firstTimes decides which deliveries get an injected fault: the first
// delivery, or publish, of every 25th message from at.
type firstTimes struct {
	mu   sync.Mutex
	seen map[string]bool
}

// due reports whether msgID is due for the fault injected at every 25th
// message from at, and marks it done: it is due once.
func (f *firstTimes) due(msgID string, at int) bool {
	if msgNumber(msgID)%25 != at {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[msgID] {
		return false
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	f.seen[msgID] = true
	return true
}

func (h *harness) handler() outbox.Handler {
	var handlerFailed, changeFailed firstTimes
	return func(ctx context.Context, m outbox.Message) error {
		h.deliveries.Add(1)
		if handlerFailed.due(m.MsgID, failHandlerAt) {
			h.failed.Add(1)
			return errors.New("e2e: injected handler failure")
		}
		var tr transfer
		if err := json.Unmarshal(m.Payload, &tr); err != nil {
			return outbox.Permanent(err)
		}
		applied, err := h.inbox.Process(ctx, group, m.MsgID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, h.insertEffect, m.MsgID, tr.Account, tr.Amount)
			if err == nil && changeFailed.due(m.MsgID, failChangeAt) {
				h.fnFailed.Add(1)
				return errors.New("e2e: injected failure of the change, after its insert")
			}
			return err
		})
		if err == nil && !applied {
			h.discarded.Add(1)
		}
		if err == nil && applied {
			h.mu.Lock()
			if len(h.sent) < duplicates {
				h.sent = append(h.sent, m)
			}
			h.mu.Unlock()
		}
		return err
	}
}
