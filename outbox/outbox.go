// Package outbox is a transactional outbox over database/sql: a message to send is a row
// written in the caller's business transaction ([Outbox.Add]), and a [Relay] sends the
// committed rows through any middleware.SendFunc (Sluice's producer, the Kafka producer,
// either with its middleware chain). A message is sent if and only if its transaction
// committed, at least once; a re-send carries the same stable key, so an inbox (package
// inbox) or Dedup on the consume side gives one effect per business transaction.
//
// What a row holds: the message (topic, flag, encoded properties, body), its stable key
// (the first KEYS entry, else its UNIQ_KEY — generated at Add when missing, stored on the
// row and sent, with KEYS set to it when the message had none), its order key (by default
// the sharding key), and the relay's bookkeeping: state (pending, sent, dead), attempts,
// the time of the next attempt, the lease (token and expiry) of the relay that claimed it.
//
// Ordering position. Rows are sent in id order per order key: a row waits while an earlier
// row of its key is unsent (pending, leased to a relay, backing off or dead); rows of other
// keys go on. The id is an auto-increment value, which concurrent transactions may commit
// out of order; two things make that safe. The relay never keeps a "last id sent" cursor:
// every claim reads the rows that are unsent now, so a row committed after a higher id was
// sent is still found (a cursor would skip it for good). And within one order key, Add
// first locks the key's row in a small companion table (<table>_keys; PostgreSQL and
// MySQL/MariaDB), held until the business transaction ends, so a second transaction adding
// a row of the same key takes its id only after the first committed or rolled back: per
// key, id order is commit order. SQLite serialises writers (BEGIN IMMEDIATE), so there id
// order is commit order already.
//
// Drivers stay out of this package: open the *sql.DB with any driver for PostgreSQL
// (github.com/jackc/pgx/v5/stdlib), MySQL/MariaDB (github.com/go-sql-driver/mysql) or
// SQLite (modernc.org/sqlite, with [SQLiteDSN]) and name the [Dialect]. Create the tables
// with [Outbox.CreateTable] or run [DDL]'s statements in a migration.
package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/sqldialect"
	"github.com/sluicemq/sluice/message"
)

// Dialect is the SQL dialect of the database holding the outbox table; the same type as
// inbox.Dialect.
type Dialect = sqldialect.Dialect

// Supported dialects.
const (
	// Postgres: PostgreSQL 9.5 or later (ON CONFLICT, FOR UPDATE SKIP LOCKED).
	Postgres = sqldialect.Postgres
	// MySQL: MySQL 8.0.1+ or MariaDB 10.6+ with InnoDB (FOR UPDATE SKIP LOCKED).
	MySQL = sqldialect.MySQL
	// SQLite: SQLite 3.24 or later; open it with [SQLiteDSN]. Claims are serialised by the
	// database's write lock, so several relays on one file take turns.
	SQLite = sqldialect.SQLite
)

// ParseDialect returns the dialect named s: "postgres" (or "postgresql", "pgx"), "mysql"
// (or "mariadb"), "sqlite" (or "sqlite3").
func ParseDialect(s string) (Dialect, error) {
	if d, ok := sqldialect.Parse(s); ok {
		return d, nil
	}
	return 0, &config.Error{Package: "outbox", Field: "Dialect", Reason: fmt.Sprintf("%q is not postgres, mysql or sqlite", s)}
}

// SQLiteDSN returns a modernc.org/sqlite data source name for the file path with the
// settings the outbox needs (BEGIN IMMEDIATE, a 10 s busy timeout, WAL).
func SQLiteDSN(path string) string { return sqldialect.SQLiteDSN(path) }

// DefaultTable is the outbox table's default name; its key-lock table is
// DefaultTable + "_keys".
const DefaultTable = "sluice_outbox"

// Column sizes.
const (
	// MaxKeyLen is the longest stable key or order key stored as is, in bytes; a longer
	// one (or one with a NUL byte or invalid UTF-8) is stored as "sha256:" + 64 hex digits
	// (the message itself keeps the full key).
	MaxKeyLen = 255
	// MaxErrorLen is the most bytes of a send error kept in last_error.
	MaxErrorLen = 1000
)

// AddError reports a message [Outbox.Add] refused before writing anything: Index is its
// position in the call (0-based) and Err the *message.ValidationError naming the field
// (topic, tag, body, properties) and the limit. errors.As(err, **message.ValidationError)
// works through it.
type AddError struct {
	Index int
	Err   error
}

// Error returns "outbox: message <i>: <reason>".
func (e *AddError) Error() string { return fmt.Sprintf("outbox: message %d: %v", e.Index, e.Err) }

// Unwrap returns the validation error.
func (e *AddError) Unwrap() error { return e.Err }

// ErrNoTx: Add was called with a nil transaction.
var ErrNoTx = errors.New("outbox: Add needs the business transaction (tx is nil)")

// Config configures an [Outbox]. DB and Dialect are required.
type Config struct {
	// DB is the database holding the outbox table (the business database). Required;
	// never closed by the outbox.
	DB *sql.DB
	// Dialect is DB's SQL dialect. Required.
	Dialect Dialect
	// Table is the outbox table's name. Default DefaultTable ("sluice_outbox"); 1..57
	// characters of [A-Za-z0-9_], not starting with a digit (the key-lock table is
	// <Table>_keys).
	Table string
	// MaxMessageSize bounds body + encoded properties, in bytes. Default
	// message.DefaultMaxMessageSize (4 MiB), the broker's default limit.
	MaxMessageSize int
	// ValidateTopic checks a message's topic at Add. Default: RocketMQ's rules
	// (message.ValidateTopic, and not a system topic producers may not send to). For an
	// outbox whose relay sends to Kafka use kafka.ValidateTopic.
	ValidateTopic func(topic string) error
	// OrderKey returns the key whose rows are sent in order, "" for none. Default: the
	// message's sharding key (message.SetShardingKey), which is also what picks its queue
	// or partition. Set it to return an aggregate id to order by that instead.
	OrderKey func(*message.Message) string
	// NotifyChannel, PostgreSQL only: when set, Add runs pg_notify(NotifyChannel, '') in
	// the business transaction, so a relay woken by a LISTEN on that channel (package
	// outbox/outboxpg) sends the row right after the commit instead of at its next poll.
	NotifyChannel string
	// Now returns the time stored on rows. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = message.DefaultMaxMessageSize
	}
	if c.ValidateTopic == nil {
		c.ValidateTopic = rocketMQTopic
	}
	if c.OrderKey == nil {
		c.OrderKey = (*message.Message).ShardingKey
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func rocketMQTopic(topic string) error {
	if err := message.ValidateTopic(topic); err != nil {
		return err
	}
	if message.IsSendForbiddenTopic(topic) {
		return &message.ValidationError{Field: "topic", Reason: topic + " is a system topic producers may not send to"}
	}
	return nil
}

// Validate checks the configuration after defaults.
func (c *Config) Validate() error {
	switch {
	case c.DB == nil:
		return &config.Error{Package: "outbox", Field: "DB", Reason: "nil"}
	case !c.Dialect.Valid():
		return &config.Error{Package: "outbox", Field: "Dialect", Reason: fmt.Sprintf("%v is not Postgres, MySQL or SQLite", c.Dialect)}
	case c.MaxMessageSize < 0:
		return &config.Error{Package: "outbox", Field: "MaxMessageSize", Reason: fmt.Sprintf("%d: must be positive", c.MaxMessageSize)}
	case c.NotifyChannel != "" && c.Dialect != Postgres:
		return &config.Error{Package: "outbox", Field: "NotifyChannel", Reason: "PostgreSQL only (LISTEN/NOTIFY)"}
	case len(c.NotifyChannel) > 63:
		return &config.Error{Package: "outbox", Field: "NotifyChannel", Reason: fmt.Sprintf("%d bytes, at most 63", len(c.NotifyChannel))}
	}
	return validateTable(c.Table)
}

func validateTable(t string) error {
	if ok, reason := sqldialect.ValidTable(t); !ok {
		return &config.Error{Package: "outbox", Field: "Table", Reason: reason}
	}
	if len(t) > sqldialect.MaxTableLen-len("_keys") {
		return &config.Error{Package: "outbox", Field: "Table", Reason: fmt.Sprintf("%d bytes, at most %d (the key-lock table %s_keys must fit 63)", len(t), sqldialect.MaxTableLen-len("_keys"), t)}
	}
	return nil
}

// Outbox writes message rows in business transactions and administers the table (stats,
// dead rows, re-drive). It is safe for concurrent use. Relays are made with [NewRelay].
type Outbox struct {
	cfg Config
	q   queries
}

// New returns an Outbox for cfg (defaults applied) or a *config.Error naming the bad field.
// It does not touch the database.
func New(cfg Config) (*Outbox, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Outbox{cfg: cfg, q: newQueries(cfg.Dialect, cfg.Table)}, nil
}

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.cfg.Table }

// Dialect returns the outbox's dialect.
func (o *Outbox) Dialect() Dialect { return o.cfg.Dialect }

// CreateTable creates the outbox table, its indexes and its key-lock table if they do not
// exist ([DDL]).
func (o *Outbox) CreateTable(ctx context.Context) error {
	stmts, err := DDL(o.cfg.Dialect, o.cfg.Table)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := o.cfg.DB.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("outbox: create table %s: %w", o.cfg.Table, err)
		}
	}
	return nil
}

// row is one message prepared for insertion.
type row struct {
	topic, orderKey, msgKey string
	flag                    int32
	props, body             []byte
}

// StableKey returns the key a message carries through the outbox: its first KEYS entry,
// else its UNIQ_KEY, else "" (Add then generates a UNIQ_KEY).
func StableKey(m *message.Message) string {
	if ks := m.Keys(); len(ks) > 0 {
		return ks[0]
	}
	return m.UniqKey()
}

// prepare validates m and returns its row. The caller's message is not modified: when a
// UNIQ_KEY (and KEYS) must be added, the row's properties are a copy with them.
func (o *Outbox) prepare(m *message.Message) (row, error) {
	if m == nil {
		return row{}, &message.ValidationError{Field: "message", Reason: "nil"}
	}
	if err := o.cfg.ValidateTopic(m.Topic); err != nil {
		return row{}, err
	}
	if m.Property(message.PropertyTransactionPrepared) != "" {
		return row{}, &message.ValidationError{Field: "properties", Reason: "property " + message.PropertyTransactionPrepared + " (a half message): the outbox row already is the transactional part"}
	}
	props := m.Properties
	key := StableKey(m)
	if m.UniqKey() == "" || len(m.Keys()) == 0 {
		props = make(map[string]string, len(m.Properties)+2)
		for k, v := range m.Properties {
			props[k] = v
		}
		if props[message.PropertyUniqClientMessageIDKeyIdx] == "" {
			props[message.PropertyUniqClientMessageIDKeyIdx] = message.NewUniqID()
		}
		if key == "" {
			key = props[message.PropertyUniqClientMessageIDKeyIdx]
			props[message.PropertyKeys] = key
		}
	}
	// The topic was checked by ValidateTopic (whose rules may be Kafka's); the tag, body,
	// properties and the size by the message package's rules.
	probe := message.Message{Topic: "outbox", Body: m.Body, Properties: props}
	if err := message.Validate(&probe, o.cfg.MaxMessageSize); err != nil {
		return row{}, err
	}
	return row{
		topic: m.Topic, orderKey: columnKey(o.cfg.OrderKey(m)), msgKey: columnKey(key), flag: m.Flag,
		props: []byte(message.MarshalProperties(props)), body: m.Body,
	}, nil
}

// columnKey returns k as stored in a key column (see MaxKeyLen).
func columnKey(k string) string {
	if len(k) <= MaxKeyLen && utf8.ValidString(k) && strings.IndexByte(k, 0) < 0 {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Add writes msgs as outbox rows inside tx, the caller's business transaction: they are
// sent if and only if tx commits. Every message is validated first (topic by
// Config.ValidateTopic; tag, non-empty body, properties and MaxMessageSize by the message
// package's rules); the first one that breaks a rule is reported as an *AddError wrapping
// the *message.ValidationError, and nothing is written. Each row gets the message's stable
// key ([StableKey]; a UNIQ_KEY is generated when there is none, and KEYS set to it when
// the message has no keys), kept for every re-send. msgs are not modified and may be
// reused after Add returns.
//
// With order keys, Add locks each distinct key's row in <table>_keys (in key order) until
// tx ends; a concurrent transaction adding rows of the same key waits for it.
func (o *Outbox) Add(ctx context.Context, tx *sql.Tx, msgs ...*message.Message) error {
	if tx == nil {
		return ErrNoTx
	}
	if len(msgs) == 0 {
		return nil
	}
	rows := make([]row, len(msgs))
	for i, m := range msgs {
		r, err := o.prepare(m)
		if err != nil {
			return &AddError{Index: i, Err: err}
		}
		rows[i] = r
	}
	now := o.cfg.Now().UnixMilli()
	if o.cfg.Dialect != SQLite {
		keys := make([]string, 0, len(rows))
		for _, r := range rows {
			if r.orderKey != "" {
				keys = append(keys, r.orderKey)
			}
		}
		if len(keys) > 0 {
			keys = sortedUniq(keys)
			for _, k := range keys {
				if _, err := tx.ExecContext(ctx, o.q.lockKey, k, now); err != nil {
					return fmt.Errorf("outbox: lock order key %q in %s_keys: %w", k, o.cfg.Table, err)
				}
			}
		}
	}
	for start := 0; start < len(rows); start += maxInsertRows {
		end := min(start+maxInsertRows, len(rows))
		q, args := o.q.insert(rows[start:end], now)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("outbox: insert %d rows into %s: %w", end-start, o.cfg.Table, err)
		}
	}
	if o.cfg.NotifyChannel != "" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, '')`, o.cfg.NotifyChannel); err != nil {
			return fmt.Errorf("outbox: pg_notify %s: %w", o.cfg.NotifyChannel, err)
		}
	}
	return nil
}

// maxInsertRows bounds one multi-row INSERT (8 placeholders a row: within every
// dialect's placeholder limit).
const maxInsertRows = 500

func sortedUniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
