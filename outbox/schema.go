package outbox

import (
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/config"
)

// Row states (column state).
const (
	StatePending = 0 // waiting to be sent (maybe leased to a relay, maybe backing off)
	StateSent    = 1 // sent; kept until RelayConfig.Retention passes (only when Retention > 0)
	StateDead    = 2 // failed RelayConfig.MaxAttempts times (or permanently); kept until re-driven
)

// DDL returns the statements that create the outbox table named table ("" for
// [DefaultTable]), its indexes and its key-lock table <table>_keys in dialect d; each is
// idempotent (IF NOT EXISTS). The table:
//
//	id               auto-increment 64-bit    the row's position (see the package doc)
//	topic            text, ≤ 249 bytes        the message's topic
//	order_key        text, ≤ 255 bytes        rows of one order key are sent in id order ('' = none)
//	message_key      text, ≤ 255 bytes        the stable key (first KEYS entry, else UNIQ_KEY)
//	flag             32-bit integer           the message flag
//	properties       bytes                    the encoded properties (UNIQ_KEY included)
//	body             bytes                    the body
//	state            small integer            StatePending, StateSent, StateDead
//	attempts         integer                  failed sends so far
//	created_at       64-bit, Unix ms          when Add wrote it
//	next_attempt_at  64-bit, Unix ms          no send before (backoff)
//	lease_token      64-bit                   the claiming relay's token, 0 when free
//	lease_until      64-bit, Unix ms          the claim's expiry
//	sent_at          64-bit, Unix ms          when it was sent (StateSent)
//	last_error       text, ≤ 1000 bytes       the last send error
//
// In MySQL/MariaDB key and byte columns are VARBINARY/BLOB (keys compare byte for byte).
func DDL(d Dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validateTable(table); err != nil {
		return nil, err
	}
	switch d {
	case Postgres:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id              BIGSERIAL     PRIMARY KEY,
	topic           VARCHAR(249)  NOT NULL,
	order_key       VARCHAR(255)  NOT NULL DEFAULT '',
	message_key     VARCHAR(255)  NOT NULL,
	flag            INTEGER       NOT NULL DEFAULT 0,
	properties      BYTEA         NOT NULL,
	body            BYTEA         NOT NULL,
	state           SMALLINT      NOT NULL DEFAULT 0,
	attempts        INTEGER       NOT NULL DEFAULT 0,
	created_at      BIGINT        NOT NULL,
	next_attempt_at BIGINT        NOT NULL DEFAULT 0,
	lease_token     BIGINT        NOT NULL DEFAULT 0,
	lease_until     BIGINT        NOT NULL DEFAULT 0,
	sent_at         BIGINT        NOT NULL DEFAULT 0,
	last_error      VARCHAR(1000) NOT NULL DEFAULT ''
)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_state ON ` + table + ` (state, id)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_unsent ON ` + table + ` (order_key, id) WHERE state <> 1`,
			// The claim's walk (pending rows in id order). Without it the planner, with the
			// statistics of a freshly filled table (every row pending), walks the primary key
			// and reads every row relayed so far before it reaches a pending one.
			`CREATE INDEX IF NOT EXISTS ` + table + `_pending ON ` + table + ` (id) WHERE state = 0`,
			`CREATE TABLE IF NOT EXISTS ` + table + `_keys (
	order_key  VARCHAR(255) PRIMARY KEY,
	touched_at BIGINT       NOT NULL
)`,
		}, nil
	case MySQL:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id              BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
	topic           VARBINARY(249) NOT NULL,
	order_key       VARBINARY(255) NOT NULL DEFAULT '',
	message_key     VARBINARY(255) NOT NULL,
	flag            INT            NOT NULL DEFAULT 0,
	properties      BLOB           NOT NULL,
	body            LONGBLOB       NOT NULL,
	state           SMALLINT       NOT NULL DEFAULT 0,
	attempts        INT            NOT NULL DEFAULT 0,
	created_at      BIGINT         NOT NULL,
	next_attempt_at BIGINT         NOT NULL DEFAULT 0,
	lease_token     BIGINT         NOT NULL DEFAULT 0,
	lease_until     BIGINT         NOT NULL DEFAULT 0,
	sent_at         BIGINT         NOT NULL DEFAULT 0,
	last_error      VARBINARY(1000) NOT NULL DEFAULT '',
	INDEX ` + table + `_state (state, id),
	INDEX ` + table + `_unsent (order_key, state, id)
) ENGINE=InnoDB`,
			`CREATE TABLE IF NOT EXISTS ` + table + `_keys (
	order_key  VARBINARY(255) NOT NULL PRIMARY KEY,
	touched_at BIGINT         NOT NULL
) ENGINE=InnoDB`,
		}, nil
	case SQLite:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	topic           TEXT    NOT NULL,
	order_key       TEXT    NOT NULL DEFAULT '',
	message_key     TEXT    NOT NULL,
	flag            INTEGER NOT NULL DEFAULT 0,
	properties      BLOB    NOT NULL,
	body            BLOB    NOT NULL,
	state           INTEGER NOT NULL DEFAULT 0,
	attempts        INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL,
	next_attempt_at INTEGER NOT NULL DEFAULT 0,
	lease_token     INTEGER NOT NULL DEFAULT 0,
	lease_until     INTEGER NOT NULL DEFAULT 0,
	sent_at         INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT    NOT NULL DEFAULT ''
)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_state ON ` + table + ` (state, id)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_unsent ON ` + table + ` (order_key, id) WHERE state <> 1`,
			`CREATE TABLE IF NOT EXISTS ` + table + `_keys (
	order_key  TEXT    PRIMARY KEY,
	touched_at INTEGER NOT NULL
)`,
		}, nil
	}
	return nil, &config.Error{Package: "outbox", Field: "Dialect", Reason: fmt.Sprintf("%v is not Postgres, MySQL or SQLite", d)}
}

// queries holds the statements of one dialect and table.
type queries struct {
	d     Dialect
	table string

	lockKey     string // (order_key, now)
	fetch       string // prefix: rows of one lease token, by id
	markSent    string // prefix: ... WHERE lease_token = ? AND id IN (
	deleteSent  string // prefix
	release     string // prefix
	fail        string // (attempts, next_attempt_at, last_error, state, id, token)
	cleanSent   string // (cutoff, limit)
	cleanKeys   string // (cutoff, limit)
	stats       string
	oldest      string
	listState   string // (state, after id, limit)
	redriveAll  string // (now)
	redriveIDs  string // prefix
	candidates  string // (now, now, now, limit)
	heads       string // prefix
	claimUpdate string // prefix: (token, until) WHERE id IN (
}

func newQueries(d Dialect, table string) queries {
	r := d.Rebind
	q := queries{d: d, table: table}
	switch d {
	case Postgres:
		q.lockKey = `INSERT INTO ` + table + `_keys (order_key, touched_at) VALUES ($1, $2) ON CONFLICT (order_key) DO UPDATE SET touched_at = EXCLUDED.touched_at`
	case MySQL:
		q.lockKey = `INSERT INTO ` + table + `_keys (order_key, touched_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE touched_at = VALUES(touched_at)`
	default:
		q.lockKey = `INSERT INTO ` + table + `_keys (order_key, touched_at) VALUES (?, ?) ON CONFLICT (order_key) DO UPDATE SET touched_at = excluded.touched_at`
	}
	q.fetch = `SELECT id, topic, order_key, flag, properties, body, attempts FROM ` + table + ` WHERE lease_token = ? AND id IN (`
	q.markSent = `UPDATE ` + table + ` SET state = 1, sent_at = ?, lease_token = 0, lease_until = 0 WHERE lease_token = ? AND id IN (`
	q.deleteSent = `DELETE FROM ` + table + ` WHERE lease_token = ? AND id IN (`
	q.release = `UPDATE ` + table + ` SET lease_token = 0, lease_until = 0 WHERE lease_token = ? AND id IN (`
	q.fail = r(`UPDATE ` + table + ` SET attempts = ?, next_attempt_at = ?, last_error = ?, state = ?, lease_token = 0, lease_until = 0 WHERE id = ? AND lease_token = ?`)
	switch d {
	case Postgres:
		q.cleanSent = `DELETE FROM ` + table + ` WHERE id IN (SELECT id FROM ` + table + ` WHERE state = 1 AND sent_at < $1 LIMIT $2)`
		q.cleanKeys = `DELETE FROM ` + table + `_keys WHERE order_key IN (SELECT order_key FROM ` + table + `_keys WHERE touched_at < $1 LIMIT $2)`
	case MySQL:
		q.cleanSent = `DELETE FROM ` + table + ` WHERE state = 1 AND sent_at < ? LIMIT ?`
		q.cleanKeys = `DELETE FROM ` + table + `_keys WHERE touched_at < ? LIMIT ?`
	default:
		q.cleanSent = `DELETE FROM ` + table + ` WHERE id IN (SELECT id FROM ` + table + ` WHERE state = 1 AND sent_at < ? LIMIT ?)`
		q.cleanKeys = `DELETE FROM ` + table + `_keys WHERE order_key IN (SELECT order_key FROM ` + table + `_keys WHERE touched_at < ? LIMIT ?)`
	}
	q.stats = `SELECT state, COUNT(*) FROM ` + table + ` GROUP BY state`
	q.oldest = `SELECT MIN(created_at) FROM ` + table + ` WHERE state = 0`
	q.listState = r(`SELECT id, topic, order_key, message_key, attempts, created_at, next_attempt_at, lease_until, last_error FROM ` + table + ` WHERE state = ? AND id > ? ORDER BY id LIMIT ?`)
	q.redriveAll = r(`UPDATE ` + table + ` SET state = 0, attempts = 0, next_attempt_at = ?, last_error = '', lease_token = 0, lease_until = 0 WHERE state = 2`)
	q.redriveIDs = `UPDATE ` + table + ` SET state = 0, attempts = 0, next_attempt_at = ?, last_error = '', lease_token = 0, lease_until = 0 WHERE state = 2 AND id IN (`
	// Candidates: free, due, pending rows in id order whose key's first unsent row (its
	// head) is not dead, leased or backing off. Looking at the head alone costs one index
	// probe per row whatever the backlog (the (order_key, id) index of unsent rows); the
	// authoritative per-key check is heads, in a later statement (see Relay.claim).
	lock := ""
	if d != SQLite {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	q.candidates = r(`SELECT o.id, o.order_key, ` + lengthFn(d) + `(o.body) + ` + lengthFn(d) + `(o.properties) FROM ` + table + ` o
WHERE o.state = 0 AND o.next_attempt_at <= ? AND o.lease_until <= ?
AND (o.order_key = '' OR NOT EXISTS (SELECT 1 FROM ` + table + ` h
	WHERE h.id = (SELECT MIN(m.id) FROM ` + table + ` m WHERE m.order_key = o.order_key AND m.state <> 1)
	AND (h.state = 2 OR h.lease_until > ? OR h.next_attempt_at > ?)))
ORDER BY o.id LIMIT ?` + lock)
	if d == MySQL {
		// The same rule in a shape MariaDB cannot turn into a scan of the whole table. It
		// rewrites the NOT EXISTS above into "head NOT IN (the ids of every blocked row)"
		// and builds that set by reading every row of the table, relayed or not, on each
		// claim (EXPLAIN: h, MATERIALIZED, type ALL), so a claim cost the table, and more
		// the more rows a purge had yet to remove. Here the head is a scalar subquery read
		// by primary key, and the key's first pending and first dead rows are one index
		// probe each in (order_key, state, id) (MIN over state <> 1 read every unsent row
		// of the key; MIN over state = 0 too, in a dependent subquery). The head is the
		// lower of the two; o itself is a pending row of its key, so the first pending row
		// exists. The walk itself is held to (state, id): from a small table's statistics
		// MariaDB chose to walk the primary key, through every sent row kept by Retention.
		q.candidates = r(`SELECT o.id, o.order_key, LENGTH(o.body) + LENGTH(o.properties) FROM ` + table + ` o FORCE INDEX (` + table + `_state)
WHERE o.state = 0 AND o.next_attempt_at <= ? AND o.lease_until <= ?
AND (o.order_key = '' OR NOT COALESCE((SELECT h.state = 2 OR h.lease_until > ? OR h.next_attempt_at > ? FROM ` + table + ` h
	WHERE h.id = LEAST(
		(SELECT m.id FROM ` + table + ` m FORCE INDEX (` + table + `_unsent) WHERE m.order_key = o.order_key AND m.state = 0 ORDER BY m.id LIMIT 1),
		COALESCE((SELECT m.id FROM ` + table + ` m FORCE INDEX (` + table + `_unsent) WHERE m.order_key = o.order_key AND m.state = 2 ORDER BY m.id LIMIT 1), ` + maxID + `))), FALSE))
ORDER BY o.id LIMIT ?` + lock)
	}
	q.heads = `SELECT order_key, id FROM ` + table + ` WHERE state <> 1 AND id <= ? AND order_key IN (`
	q.claimUpdate = `UPDATE ` + table + ` SET lease_token = ?, lease_until = ? WHERE id IN (`
	return q
}

// maxID is larger than any row id.
const maxID = "9223372036854775807"

func lengthFn(d Dialect) string {
	if d == Postgres {
		return "octet_length"
	}
	return "LENGTH"
}

// in returns prefix followed by n placeholders and ")", rebound for the dialect; args
// before the list are counted by the prefix's own '?'.
func (q queries) in(prefix string, n int, suffix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 3*n + len(suffix) + 1)
	b.WriteString(prefix)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("?")
	}
	b.WriteString(")")
	b.WriteString(suffix)
	return q.d.Rebind(b.String())
}

// insert returns one multi-row INSERT of rs and its arguments.
func (q queries) insert(rs []row, now int64) (string, []any) {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + q.table + ` (topic, order_key, message_key, flag, properties, body, created_at, next_attempt_at) VALUES `)
	args := make([]any, 0, 8*len(rs))
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, r.topic, r.orderKey, r.msgKey, r.flag, r.props, r.body, now, now)
	}
	return q.d.Rebind(b.String()), args
}
