package acl

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/atomicfile"
)

// nonceCache remembers the signature v2 nonces seen, each until its expiry. Every entry
// lives the same ttl, so they expire in the order they came: a queue drops them in O(1)
// each, with no sweep of the whole map (which a client over a limit could make the
// broker repeat on every request).
type nonceCache struct {
	mu        sync.Mutex
	seen      map[string]time.Time // accessKey NUL nonce -> expiry
	queue     []nonceEntry         // in arrival order; queue[head:] are live
	head      int
	perAcct   map[string]int // nonces held by accessKey
	overQuota int64          // requests refused for the per-account quota
}

type nonceEntry struct {
	key, ak string
	exp     time.Time
}

// NonceQuotaError refuses a signature v2 request of an account that holds its share of
// the nonce store (aclSignatureNoncesPerAccount); other accounts are unaffected.
type NonceQuotaError struct {
	AccessKey string
	Held      int // nonces the account holds now
	Limit     int
}

func (e *NonceQuotaError) Error() string {
	return fmt.Sprintf("accessKey=%.64s holds %d signature v2 nonces, aclSignatureNoncesPerAccount limit %d: try again later", e.AccessKey, e.Held, e.Limit)
}

// expireLocked drops the entries expired at now.
func (c *nonceCache) expireLocked(now time.Time) {
	for c.head < len(c.queue) && !now.Before(c.queue[c.head].exp) {
		e := c.queue[c.head]
		c.queue[c.head] = nonceEntry{}
		c.head++
		if exp, ok := c.seen[e.key]; ok && exp.Equal(e.exp) {
			delete(c.seen, e.key)
		}
		if c.perAcct[e.ak]--; c.perAcct[e.ak] <= 0 {
			delete(c.perAcct, e.ak)
		}
	}
	if c.head > 1024 && c.head > len(c.queue)/2 {
		c.queue = append(c.queue[:0:0], c.queue[c.head:]...)
		c.head = 0
	}
}

// add records nonce of account ak, refusing one seen before, an account holding
// perAccount nonces (a *NonceQuotaError) and any once the cache holds limit (bounded
// memory).
func (c *nonceCache) add(ak, nonce string, now time.Time, ttl time.Duration, limit, perAccount int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.perAcct = map[string]time.Time{}, map[string]int{}
	}
	c.expireLocked(now)
	key := ak + "\x00" + nonce
	if _, ok := c.seen[key]; ok {
		return errors.New("signature v2 nonce already used (a replayed request)")
	}
	if n := c.perAcct[ak]; perAccount > 0 && n >= perAccount {
		c.overQuota++
		return &NonceQuotaError{AccessKey: ak, Held: n, Limit: perAccount}
	}
	if len(c.seen) >= limit {
		return fmt.Errorf("%d signature v2 nonces are remembered (limit): try again later", len(c.seen))
	}
	exp := now.Add(ttl)
	c.seen[key] = exp
	c.queue = append(c.queue, nonceEntry{key: key, ak: ak, exp: exp})
	c.perAcct[ak]++
	return nil
}

// refusedQuota returns how many requests the per-account quota refused.
func (c *nonceCache) refusedQuota() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overQuota
}

// sigFloor refuses signature v2 times at or before a floor, so a request accepted before
// a restart (whose nonce the new process does not know) cannot be replayed after it.
// The floor is the highest time an earlier process may have accepted: read from a file
// it keeps, or, without a file, the start of this process.
//
// Before accepting a time past what the file allows, the file is moved ahead (fsync'd)
// to that time plus reserveStep, so the file always bounds every accepted time, also
// after a crash; a clean stop writes the highest time accepted.
type sigFloor struct {
	mu       sync.Mutex
	path     string // "" : not kept; the floor is the start time
	floor    int64  // unix ms; times <= floor are refused
	high     int64  // highest time accepted by this process
	reserved int64  // what the file says: every accepted time is <= it
}

// reserveStep is how far past an accepted time the file is moved, so it is written at
// most about once per step under steady traffic; after a crash v2 requests signed up to
// this long after the last one accepted are refused.
const reserveStep = time.Second

// openFloor returns the floor kept in path ("": the current time).
func openFloor(path string, now time.Time) (*sigFloor, error) {
	f := &sigFloor{path: path, floor: now.UnixMilli()}
	if path == "" {
		return f, nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// First start with this file: nothing earlier is known, so the start time.
	case err != nil:
		return nil, err
	default:
		ms, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if perr != nil || ms < 0 {
			return nil, fmt.Errorf("signature v2 floor file %s: %q is not a unix time in ms", path, strings.TrimSpace(string(data)))
		}
		f.floor = ms
	}
	f.reserved = f.floor
	return f, nil
}

// admit accepts time ms (unix ms) when it is after the floor, first moving the kept
// reservation past it.
func (f *sigFloor) admit(ms int64, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ms <= f.floor {
		return fmt.Errorf("signature v2 time %d is not after %d, the latest a signature may have been accepted before the last restart (sign again)", ms, f.floor)
	}
	if f.path != "" && ms > f.reserved {
		r := max(ms, now.UnixMilli()) + reserveStep.Milliseconds()
		if err := writeFloor(f.path, r); err != nil {
			return fmt.Errorf("signature v2 floor not saved, request refused: %v", err)
		}
		f.reserved = r
	}
	f.high = max(f.high, ms)
	return nil
}

// save writes the highest time accepted (or the floor) to the file, so a clean restart
// refuses only times up to it.
func (f *sigFloor) save() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == "" {
		return nil
	}
	v := max(f.high, f.floor)
	if err := writeFloor(f.path, v); err != nil {
		return err
	}
	f.reserved = v
	return nil
}

// writeFloor writes ms to path atomically and durably (temp file, fsync, rename, fsync
// of the directory).
func writeFloor(path string, ms int64) error {
	return atomicfile.Write(path, []byte(strconv.FormatInt(ms, 10)+"\n"))
}
