package outboxmysql

import (
	"context"
	"sync/atomic"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// dump is a running binary log reader: its transactions arrive on commits,
// which is closed when the reader ends, with err then set.
type dump struct {
	commits <-chan commit
	err     error
	stop    func()
}

// startDump starts reading the binary log from from (the server's position
// when zero); start is where it started.
// recv, when set, is kept at the reader's position (reader.lin).
func (b *BinlogDriver) startDump(ctx context.Context, from BinlogPosition, decode bool, recv *atomic.Int64) (*dump, BinlogPosition, error) {
	s, err := b.check(ctx)
	if err != nil {
		return nil, from, err
	}
	var cols *columns
	if decode {
		// A missing or foreign table fails here, before the dump starts.
		if cols, err = b.loadColumns(ctx); err != nil {
			return nil, from, err
		}
	}
	syncer, st, start, err := b.open(s, from, decode)
	if err != nil {
		return nil, from, err
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan commit, 64)
	d := &dump{commits: out}
	r := &reader{b: b, decode: decode, cols: cols, file: start.File, last: start.Offset, recv: recv}
	if recv != nil {
		recv.Store(r.lin())
	}
	go func() {
		defer close(out)
		d.err = r.pump(ctx, st, out)
	}()
	d.stop = func() {
		cancel()
		for range out {
		}
		syncer.Close()
	}
	return d, start, nil
}

// stream is StreamFrom once it holds the stream.
func (b *BinlogDriver) stream(ctx context.Context, from BinlogPosition, fn func(context.Context, []outbox.Message) error) error {
	ctx, release, err := b.lock(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer release()
	d, start, err := b.startDump(ctx, from, true, &b.lag.recv)
	if err != nil {
		return b.ended(ctx, err)
	}
	defer d.stop()
	b.confirm(start, b.lag.recv.Load())
	b.setLive(true)
	defer b.setLive(false)
	var batch []outbox.Message
	var end BinlogPosition
	var endLin int64
	open := false // batch holds transactions not yet handed to fn
	for {
		var c commit
		var ok bool
		if open {
			select {
			case c, ok = <-d.commits:
			default:
				// Nothing more for now: hand over what came.
				if err := fn(ctx, batch); err != nil {
					return b.ended(ctx, err)
				}
				b.confirm(end, endLin)
				batch, open = nil, false
				continue
			}
		} else {
			select {
			case c, ok = <-d.commits:
			case <-ctx.Done():
				return b.ended(ctx, nil)
			}
		}
		if !ok {
			return b.ended(ctx, d.err)
		}
		if c.rows == 0 && !open {
			b.confirm(c.end, c.lin)
			continue
		}
		if open && len(batch)+len(c.msgs) > b.cfg.MaxBatch {
			if err := fn(ctx, batch); err != nil {
				return b.ended(ctx, err)
			}
			b.confirm(end, endLin)
			batch = nil
		}
		if c.rows > 0 {
			b.noteOldest(c.at)
		}
		batch, end, endLin, open = append(batch, c.msgs...), c.end, c.lin, true
	}
}

// watch is Watch.
func (b *BinlogDriver) watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	d, _, err := b.startDump(ctx, BinlogPosition{}, false, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer d.stop()
	fn(outboxdriver.Change{Via: "start"})
	for {
		select {
		case c, ok := <-d.commits:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return d.err
			}
			if c.rows > 0 {
				fn(outboxdriver.Change{Via: "binlog"})
			}
		case <-ctx.Done():
			return nil
		}
	}
}
