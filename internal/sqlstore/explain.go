package sqlstore

import (
	"context"
	"strings"

	"github.com/outbox-go/outbox"
)

// ExplainClaim returns the database's plans for the claim's statements, one
// line per plan line: the rescan (from the first id, or PostgreSQL's
// low-water mark) and, where the dialect has one, the claim from a cursor,
// after a line "-- from a cursor". The claim's setup runs first.
func (s *Store) ExplainClaim(ctx context.Context) (string, error) {
	begin := s.db.Begin
	if s.c.ClaimSetup != "" {
		begin = s.beginWith(s.c.ClaimSetup)
	}
	tx, err := begin(ctx)
	if err != nil {
		return "", s.wrap("explain claim", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var plan strings.Builder
	for _, e := range s.c.claimer.explain() {
		if e.name != "" {
			plan.WriteString("-- " + e.name + "\n")
		}
		if err := s.explainInto(ctx, tx, &plan, e.stmt, e.args...); err != nil {
			return "", s.wrap("explain claim", err)
		}
	}
	return plan.String(), nil
}

// ExplainBacklog returns the database's plans for Backlog's statements, one
// line per plan line, the dead count's after a line "-- dead". The
// backlog's setup runs first.
func (s *Store) ExplainBacklog(ctx context.Context) (string, error) {
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain backlog", err)
	}
	defer done()
	var plan strings.Builder
	for i, stmt := range []string{s.c.Backlog, s.c.DeadCount} {
		if i > 0 {
			plan.WriteString("-- dead\n")
		}
		if err := s.explainInto(ctx, q, &plan, stmt); err != nil {
			return "", s.wrap("explain backlog", err)
		}
	}
	return plan.String(), nil
}

// ExplainDead returns the database's plans for the statements on the DEAD
// rows, as ListMessages, Backlog, RetryDead and DropDead run them (the last
// two for every DEAD row), one line per plan line, each after a line "--
// list", "-- count", "-- retry" or "-- drop". Nothing is changed.
func (s *Store) ExplainDead(ctx context.Context) (string, error) {
	list, listArgs := s.listQuery(outbox.ListFilter{Status: outbox.StatusDead, Limit: 100})
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain dead", err)
	}
	defer done()
	return s.explainAll(ctx, "explain dead", []explained{
		{"list", s.db, list, listArgs},
		{"count", q, s.c.DeadCount, nil},
		{"retry", s.db, s.c.RetryDead, []any{"", "[]", true, ""}},
		{"drop", s.db, s.c.DropDead, []any{"[]", true, ""}},
	})
}

// ExplainStats returns the database's plans for the statements of Stats
// and for ListMessages of the NEW rows, one line per plan line, each after
// a line "-- pending", "-- dead", "-- span" or "-- list new". Nothing is
// changed.
func (s *Store) ExplainStats(ctx context.Context) (string, error) {
	list, listArgs := s.listQuery(outbox.ListFilter{Status: outbox.StatusNew, Limit: 100})
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain stats", err)
	}
	defer done()
	var listQ Querier = s.db
	if s.c.ListNew != "" {
		listQ = q
	}
	return s.explainAll(ctx, "explain stats", []explained{
		{"pending", q, s.c.StatsPending, nil},
		{"dead", q, s.c.StatsDead, nil},
		{"span", q, s.c.StatsSpan, nil},
		{"list new", listQ, list, listArgs},
	})
}

// explained is one statement of an Explain call, under its name.
type explained struct {
	name string
	q    Querier
	stmt string
	args []any
}

// explainAll writes the plan of every statement of stmts, each after a line
// "-- name". what names the call in an error.
func (s *Store) explainAll(ctx context.Context, what string, stmts []explained) (string, error) {
	var plan strings.Builder
	for _, e := range stmts {
		plan.WriteString("-- " + e.name + "\n")
		if err := s.explainInto(ctx, e.q, &plan, e.stmt, e.args...); err != nil {
			return "", s.wrap(what+": "+e.name, err)
		}
	}
	return plan.String(), nil
}

// explainInto writes the plan of stmt to plan, one line per plan line.
func (s *Store) explainInto(ctx context.Context, q Querier, plan *strings.Builder, stmt string, args ...any) error {
	rows, err := q.Query(ctx, s.c.Explain+" "+stmt, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		cols, err := rowStrings(rows)
		if err != nil {
			return err
		}
		plan.WriteString(strings.Join(cols, " ") + "\n")
	}
	return rows.Err()
}
