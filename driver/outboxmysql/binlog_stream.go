package outboxmysql

import (
	"context"

	"github.com/outbox-go/outbox"
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
func (b *BinlogDriver) startDump(ctx context.Context, from BinlogPosition, decode bool) (*dump, BinlogPosition, error) {
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
	r := &reader{b: b, decode: decode, cols: cols, file: start.File, last: start.Offset}
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
	d, start, err := b.startDump(ctx, from, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer d.stop()
	b.confirm(start)
	var batch []outbox.Message
	var end BinlogPosition
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
					return err
				}
				b.confirm(end)
				batch, open = nil, false
				continue
			}
		} else {
			select {
			case c, ok = <-d.commits:
			case <-ctx.Done():
				return nil
			}
		}
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return d.err
		}
		if c.rows == 0 && !open {
			b.confirm(c.end)
			continue
		}
		if open && len(batch)+len(c.msgs) > b.cfg.MaxBatch {
			if err := fn(ctx, batch); err != nil {
				return err
			}
			b.confirm(end)
			batch = nil
		}
		batch, end, open = append(batch, c.msgs...), c.end, true
	}
}

// watch is Watch.
func (b *BinlogDriver) watch(ctx context.Context, fn func(outbox.Change)) error {
	d, _, err := b.startDump(ctx, BinlogPosition{}, false)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer d.stop()
	fn(outbox.Change{Via: "start"})
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
				fn(outbox.Change{Via: "binlog"})
			}
		case <-ctx.Done():
			return nil
		}
	}
}
