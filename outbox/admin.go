package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/config"
)

// Stats is a snapshot of an outbox table.
type Stats struct {
	Pending int64 // unsent rows (the backlog), leased or not
	Sent    int64 // sent rows still kept (RelayConfig.Retention > 0)
	Dead    int64 // dead rows waiting for a re-drive
	// OldestPending is when the oldest unsent row was added (zero when there is none).
	OldestPending time.Time
}

// OldestPendingAge returns how long the oldest unsent row has waited at now (0 when none).
func (s Stats) OldestPendingAge(now time.Time) time.Duration {
	if s.OldestPending.IsZero() {
		return 0
	}
	return max(now.Sub(s.OldestPending), 0)
}

// Stats counts the table's rows per state and finds the oldest unsent one.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	rows, err := o.cfg.DB.QueryContext(ctx, o.q.stats)
	if err != nil {
		return st, fmt.Errorf("outbox: stats of %s: %w", o.cfg.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var state int
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return st, fmt.Errorf("outbox: stats of %s: %w", o.cfg.Table, err)
		}
		switch state {
		case StatePending:
			st.Pending = n
		case StateSent:
			st.Sent = n
		case StateDead:
			st.Dead = n
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("outbox: stats of %s: %w", o.cfg.Table, err)
	}
	var oldest sql.NullInt64
	if err := o.cfg.DB.QueryRowContext(ctx, o.q.oldest).Scan(&oldest); err != nil {
		return st, fmt.Errorf("outbox: oldest row of %s: %w", o.cfg.Table, err)
	}
	if oldest.Valid {
		st.OldestPending = time.UnixMilli(oldest.Int64)
	}
	return st, nil
}

// Row describes an outbox row (without its body) for listings.
type Row struct {
	ID            int64
	Topic         string
	OrderKey      string
	MessageKey    string
	Attempts      int
	CreatedAt     time.Time
	NextAttemptAt time.Time
	LeaseUntil    time.Time // zero when not leased
	LastError     string
}

// MaxList is the most rows one listing returns.
const MaxList = 10_000

// List returns up to limit rows of state (StatePending, StateSent or StateDead) with id
// greater than after, in id order (page with the last ID returned). limit is 1..MaxList.
func (o *Outbox) List(ctx context.Context, state int, after int64, limit int) ([]Row, error) {
	if state < StatePending || state > StateDead {
		return nil, &config.Error{Package: "outbox", Field: "state", Reason: fmt.Sprintf("%d: want 0 (pending), 1 (sent) or 2 (dead)", state)}
	}
	if limit < 1 || limit > MaxList {
		return nil, &config.Error{Package: "outbox", Field: "limit", Reason: fmt.Sprintf("%d: want 1..%d", limit, MaxList)}
	}
	rows, err := o.cfg.DB.QueryContext(ctx, o.q.listState, state, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list %s: %w", o.cfg.Table, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var created, next, lease int64
		if err := rows.Scan(&r.ID, &r.Topic, &r.OrderKey, &r.MessageKey, &r.Attempts, &created, &next, &lease, &r.LastError); err != nil {
			return nil, fmt.Errorf("outbox: list %s: %w", o.cfg.Table, err)
		}
		r.CreatedAt = time.UnixMilli(created)
		r.NextAttemptAt = time.UnixMilli(next)
		if lease > 0 {
			r.LeaseUntil = time.UnixMilli(lease)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: list %s: %w", o.cfg.Table, err)
	}
	return out, nil
}

// Dead returns up to limit dead rows with id greater than after (List with StateDead).
func (o *Outbox) Dead(ctx context.Context, after int64, limit int) ([]Row, error) {
	return o.List(ctx, StateDead, after, limit)
}

// Redrive makes the dead rows ids pending again with their attempts reset, to be sent at
// once (in their key's order); ids that are not dead rows are ignored. With no ids every
// dead row is re-driven. It returns how many rows it re-drove.
func (o *Outbox) Redrive(ctx context.Context, ids ...int64) (int64, error) {
	now := o.cfg.Now().UnixMilli()
	var res sql.Result
	var err error
	if len(ids) == 0 {
		res, err = o.cfg.DB.ExecContext(ctx, o.q.redriveAll, now)
	} else {
		var total int64
		for start := 0; start < len(ids); start += maxInsertRows {
			chunk := ids[start:min(start+maxInsertRows, len(ids))]
			args := make([]any, 0, len(chunk)+1)
			args = append(args, now)
			for _, id := range chunk {
				args = append(args, id)
			}
			res, err = o.cfg.DB.ExecContext(ctx, o.q.in(o.q.redriveIDs, len(chunk), ""), args...)
			if err != nil {
				return total, fmt.Errorf("outbox: redrive rows of %s: %w", o.cfg.Table, err)
			}
			n, _ := res.RowsAffected()
			total += n
		}
		return total, nil
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: redrive rows of %s: %w", o.cfg.Table, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
