// Package inbox is a transactional inbox over database/sql: a consume step whose handler
// receives a database transaction in which the message's key has just been recorded, so
// the business effect and the "this message is done" record commit together, or neither
// does. For effects in that database a message has its effect exactly once, whatever
// crashes, redeliveries, lock expiries or database restarts happen around it.
//
// Per delivered batch (one message unless the consumer's ConsumeMessageBatchMaxSize is
// larger), in one transaction:
//
//  1. INSERT a row (consumer group, message key) per distinct key of the batch, in key
//     order, skipping rows that exist (PostgreSQL and SQLite: one multi-row INSERT ...
//     RETURNING per batch; MySQL: one INSERT IGNORE per key). A row that already exists
//     means the message was done before (committed): it is a duplicate and is not handed
//     to the handler; so is a second message with the same key in the same batch;
//  2. the handler runs with the transaction and the messages whose rows were new (it is not
//     called when there are none);
//  3. the handler returns nil → COMMIT → ConsumeSuccess: the whole batch is acknowledged,
//     duplicates included. The handler returns an error or panics, or the commit fails →
//     ROLLBACK (the rows go with it) → ReconsumeLater: the whole batch comes again, and its
//     messages are new again.
//
// A consumer killed mid-handler leaves an open transaction the database rolls back when the
// connection drops; the message is redelivered (its offset was never committed) and runs
// again as new. Two deliveries of one message running at once (two consumers after a
// rebalance, a retry racing the original) both insert the same row: the database makes the
// second wait for the first transaction and then reports the row as existing (committed)
// or lets it through (rolled back), so the handler's effect is committed at most once.
//
// The message key is [Config.KeyFunc], by default [middleware.StableKey]: the first KEYS
// entry (set by the producer or by middleware.Keys, kept on retries, DLQ re-drives and
// parked resends), or else the client message id (UNIQ_KEY). A message with neither is
// refused ([ErrNoKey], ReconsumeLater) rather than run without protection.
//
// Drivers stay out of this package: open the *sql.DB with any driver for PostgreSQL
// (github.com/jackc/pgx/v5/stdlib), MySQL/MariaDB (github.com/go-sql-driver/mysql) or
// SQLite (modernc.org/sqlite) and name the [Dialect]. Create the table with
// [CreateTable] or [Inbox.CreateTable], or run [DDL]'s statements in a migration; delete
// old rows with a [Sweeper].
package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// ErrNoKey: a message has no key (KeyFunc returned ""), so the inbox cannot tell its copies
// apart; it is refused with ReconsumeLater (and after the consumer's retries goes to the
// DLQ) instead of running unprotected. Give such messages keys on the send side
// (middleware.Keys) or set Config.KeyFunc.
var ErrNoKey = errors.New("inbox: message has no key")

// Handler applies a batch's business effect inside tx, the inbox transaction. It must do
// all its database work through tx (not through the *sql.DB: that would commit apart from
// the inbox row) and must neither commit nor roll back tx. msgs holds the messages of the
// delivered batch that were not done before, in delivery order, at least one. Returning
// nil commits the effect with the inbox rows; returning an error (or panicking) rolls both
// back and the batch is delivered again later.
type Handler func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error

// Config configures an [Inbox]. DB, Dialect and Group are required.
type Config struct {
	// DB is the database holding the inbox table and the business tables. Required. The
	// inbox never closes it.
	DB *sql.DB
	// Dialect is DB's SQL dialect. Required.
	Dialect Dialect
	// Group scopes the rows: the consumer group whose handler this is. Two groups that
	// consume the same topic each apply the message once, so they must not share rows.
	// Required; at most MaxGroupLen bytes.
	Group string
	// Table is the inbox table's name. Default DefaultTable ("sluice_inbox"); 1..63
	// characters of [A-Za-z0-9_], not starting with a digit.
	Table string
	// KeyFunc returns a message's key. Default middleware.StableKey (first KEYS entry, else
	// UNIQ_KEY). A key longer than MaxKeyLen bytes, with a NUL byte or invalid UTF-8, or
	// starting with "sha256:", is stored hashed (see RowKey).
	KeyFunc func(*message.MessageExt) string
	// TxOptions are passed to BeginTx. Default nil: the database's default isolation (READ
	// COMMITTED in PostgreSQL, REPEATABLE READ in MySQL/InnoDB, SERIALIZABLE in SQLite);
	// the inbox is correct under all of them because the duplicate check is the primary
	// key's uniqueness, not a read.
	TxOptions *sql.TxOptions
	// Now returns the time stored in processed_at. Default time.Now.
	Now func() time.Time
	// Logger receives a warning when a handler's transaction fails to commit. Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.KeyFunc == nil {
		c.KeyFunc = middleware.StableKey
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults.
func (c *Config) Validate() error {
	switch {
	case c.DB == nil:
		return &config.Error{Package: "inbox", Field: "DB", Reason: "nil"}
	case !c.Dialect.Valid():
		return &config.Error{Package: "inbox", Field: "Dialect", Reason: fmt.Sprintf("%v is not Postgres, MySQL or SQLite", c.Dialect)}
	case c.Group == "":
		return &config.Error{Package: "inbox", Field: "Group", Reason: "empty"}
	case len(c.Group) > MaxGroupLen:
		return &config.Error{Package: "inbox", Field: "Group", Reason: fmt.Sprintf("%d bytes, at most %d", len(c.Group), MaxGroupLen)}
	}
	return validateTable(c.Table)
}

// Inbox runs handlers in inbox transactions for one consumer group and table. It is safe
// for concurrent use (one transaction per call).
type Inbox struct {
	cfg    Config
	insert string
	exists string
}

// New returns an Inbox for cfg (defaults applied) or a *config.Error naming the bad field.
// It does not touch the database; create the table with [Inbox.CreateTable] or a migration.
func New(cfg Config) (*Inbox, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Inbox{cfg: cfg, insert: insertSQL(cfg.Dialect, cfg.Table), exists: existsSQL(cfg.Dialect, cfg.Table)}, nil
}

// CreateTable creates the inbox's table and index if they do not exist ([DDL]).
func (ib *Inbox) CreateTable(ctx context.Context) error {
	return createTable(ctx, ib.cfg.DB, ib.cfg.Dialect, ib.cfg.Table)
}

// Table returns the inbox table's name.
func (ib *Inbox) Table() string { return ib.cfg.Table }

// RowKey returns the message_key column value for key: key itself when it is at most
// MaxKeyLen bytes of valid UTF-8 without a NUL byte and does not start with "sha256:",
// else "sha256:" + 64 lowercase hex digits of SHA-256(key). (PostgreSQL's text types
// refuse NUL and invalid UTF-8, and the row key must be the same in every dialect.) A key
// that starts with "sha256:" is hashed too, so that no key is stored as the hashed form
// of another: the two encodings are disjoint.
func RowKey(key string) string {
	if len(key) <= MaxKeyLen && utf8.ValidString(key) && strings.IndexByte(key, 0) < 0 && !strings.HasPrefix(key, hashedKeyPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKeyPrefix + hex.EncodeToString(sum[:])
}

// hashedKeyPrefix starts every hashed row key (see RowKey).
const hashedKeyPrefix = "sha256:"

// Processed reports whether key (a message key as KeyFunc returns it) has a committed row
// for the inbox's group, and when it was inserted.
func (ib *Inbox) Processed(ctx context.Context, key string) (bool, time.Time, error) {
	var ms int64
	err := ib.cfg.DB.QueryRowContext(ctx, ib.exists, ib.cfg.Group, RowKey(key)).Scan(&ms)
	if errors.Is(err, sql.ErrNoRows) {
		return false, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("inbox: read %s: %w", ib.cfg.Table, err)
	}
	return true, time.UnixMilli(ms), nil
}

// Consume returns h as the innermost step of a consume chain (see the package doc): put it
// where a middleware.ConsumeFunc handler goes, for example consumer.Subscribe(topic, tags,
// ib.Consume(h)), with middleware.Logging, metrics and middleware.Recover outside it. When
// the batch holds one new message, the handler's context also carries its key
// ([middleware.IdempotencyKey]).
//
// Results: ConsumeSuccess with nil after a commit (or when every message was a duplicate,
// noted as middleware.ReasonDuplicate each); ReconsumeLater with the handler's error, a
// *middleware.PanicError (noted ReasonPanic), an [ErrNoKey] error, or the database's error
// (begin, insert, commit) otherwise.
func (ib *Inbox) Consume(h Handler) middleware.ConsumeFunc {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if err := ib.run(ctx, msgs, h); err != nil {
			return message.ReconsumeLater, err
		}
		return message.ConsumeSuccess, nil
	}
}

type keyed struct {
	idx int
	key string
}

func (ib *Inbox) run(ctx context.Context, msgs []*message.MessageExt, h Handler) error {
	if len(msgs) == 0 {
		return nil
	}
	ks := make([]keyed, 0, len(msgs))
	for i, m := range msgs {
		k := ""
		if m != nil {
			k = ib.cfg.KeyFunc(m)
		}
		if k == "" {
			id := ""
			if m != nil {
				id = m.MsgID
			}
			return fmt.Errorf("%w (message %d of %d, id %q)", ErrNoKey, i+1, len(msgs), id)
		}
		ks = append(ks, keyed{idx: i, key: RowKey(k)})
	}
	// Insert in key order so two batches sharing keys lock their rows in the same order
	// (no deadlock between them).
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})

	tx, err := ib.cfg.DB.BeginTx(ctx, ib.cfg.TxOptions)
	if err != nil {
		return fmt.Errorf("inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	now := ib.cfg.Now().UnixMilli()
	inserted, err := ib.insertKeys(ctx, tx, ks, now)
	if err != nil {
		return err
	}
	// The first message of each inserted key (in delivery order) is new; the others —
	// keys done before, or a key's later copies in this batch — are duplicates.
	fresh := make([]bool, len(msgs))
	nFresh := 0
	for _, k := range ks { // key order, then delivery order within a key
		if inserted[k.key] {
			fresh[k.idx] = true
			nFresh++
			delete(inserted, k.key)
		} else {
			middleware.Note(ctx, middleware.ReasonDuplicate)
		}
	}
	if nFresh > 0 {
		todo := msgs
		if nFresh < len(msgs) {
			todo = make([]*message.MessageExt, 0, nFresh)
			for i, m := range msgs {
				if fresh[i] {
					todo = append(todo, m)
				}
			}
		}
		hctx := ctx
		if len(todo) == 1 {
			hctx = middleware.WithIdempotencyKey(ctx, ib.cfg.KeyFunc(todo[0]))
		}
		if err := callRecovered(hctx, h, tx, todo); err != nil {
			return err
		}
	}
	done = true
	if err := tx.Commit(); err != nil {
		// The outcome is unknown (the commit may have reached the database before the
		// connection failed): the batch comes again and finds its rows if it committed.
		ib.cfg.Logger.WarnContext(ctx, "inbox: commit failed; the batch will be delivered again",
			"group", ib.cfg.Group, "table", ib.cfg.Table, "messages", len(msgs), "error", err)
		return fmt.Errorf("inbox: commit: %w", err)
	}
	return nil
}

// insertKeys inserts the rows of ks (sorted by key) and returns the keys whose rows were
// new. PostgreSQL and SQLite insert a batch in one statement (INSERT ... RETURNING gives
// back only the rows inserted); MySQL, and a batch of one key, use one INSERT per key and
// its affected-row count.
func (ib *Inbox) insertKeys(ctx context.Context, tx *sql.Tx, ks []keyed, now int64) (map[string]bool, error) {
	uniq := make([]string, 0, len(ks))
	for _, k := range ks {
		if len(uniq) == 0 || uniq[len(uniq)-1] != k.key {
			uniq = append(uniq, k.key)
		}
	}
	inserted := make(map[string]bool, len(uniq))
	if len(uniq) > 1 && ib.cfg.Dialect != MySQL {
		q, args := insertManySQL(ib.cfg.Dialect, ib.cfg.Table, ib.cfg.Group, uniq, now)
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("inbox: insert %d keys into %s: %w", len(uniq), ib.cfg.Table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return nil, fmt.Errorf("inbox: insert %d keys into %s: %w", len(uniq), ib.cfg.Table, err)
			}
			inserted[k] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("inbox: insert %d keys into %s: %w", len(uniq), ib.cfg.Table, err)
		}
		return inserted, nil
	}
	for _, k := range uniq {
		res, err := tx.ExecContext(ctx, ib.insert, ib.cfg.Group, k, now)
		if err != nil {
			return nil, fmt.Errorf("inbox: insert key %q into %s: %w", k, ib.cfg.Table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("inbox: insert key %q into %s: %w", k, ib.cfg.Table, err)
		}
		if n > 0 {
			inserted[k] = true
		}
	}
	return inserted, nil
}

// callRecovered runs h and turns a panic into a *middleware.PanicError (the deferred
// rollback in run still happens).
func callRecovered(ctx context.Context, h Handler, tx *sql.Tx, msgs []*message.MessageExt) error {
	_, err := middleware.CallRecovered(ctx, func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if err := h(ctx, tx, msgs); err != nil {
			return message.ReconsumeLater, err
		}
		return message.ConsumeSuccess, nil
	}, msgs)
	return err
}
