package console

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/addrkey"
)

// Failed sign-ins (a wrong /login token, a wrong bearer token, wrong basic-auth
// credentials) are limited per remote address (an IPv4 address, an IPv6 /64: a client
// usually holds a whole /64): after loginFreeFailures failures an address is locked out
// for Config.LoginLockout, doubling with each further failure up to loginMaxLockout;
// while locked out its credentials are not checked at all (answered 429 Too Many
// Requests with Retry-After). A successful sign-in clears the address's record; a record
// is forgotten loginForget after its last failure. Behind a reverse proxy every client
// shares the proxy's address.
//
// Failures from all addresses together are limited too (Config.LoginFailuresPerMinute, a
// token bucket of that size refilled over a minute), so holding many addresses, or more
// than the loginMaxAddresses records kept, does not buy more guesses: once the bucket is
// empty every address is answered 429 until it refills.
const (
	loginFreeFailures = 5
	loginMaxLockout   = 15 * time.Minute
	loginForget       = 15 * time.Minute
	loginMaxAddresses = 10000 // records kept; beyond, expired ones are swept first
)

type loginRecord struct {
	failures int
	last     time.Time // last failure
	until    time.Time // locked out until
}

// loginLimiter tracks failed sign-ins by remote address.
type loginLimiter struct {
	lockout time.Duration // the first lockout
	mu      sync.Mutex
	byIP    map[string]*loginRecord
	now     func() time.Time

	// The global bucket: up to perMinute failures, refilled perMinute per minute.
	perMinute int
	tokens    float64
	filled    time.Time // when tokens was last brought up to date
}

func newLoginLimiter(lockout time.Duration, perMinute int) *loginLimiter {
	return &loginLimiter{lockout: lockout, byIP: map[string]*loginRecord{}, now: time.Now,
		perMinute: perMinute, tokens: float64(perMinute)}
}

// remoteHost is the key r's address is limited by.
func remoteHost(r *http.Request) string { return addrkey.Of(r.RemoteAddr) }

// refillLocked brings the global bucket up to now.
func (l *loginLimiter) refillLocked(now time.Time) {
	if !l.filled.IsZero() {
		if d := now.Sub(l.filled); d > 0 {
			l.tokens = min(float64(l.perMinute), l.tokens+d.Minutes()*float64(l.perMinute))
		}
	}
	l.filled = now
}

// lockedOut reports how long the address of r must still wait (0: it may try): its own
// lockout, or, when failures from all addresses emptied the global bucket, until one
// failure is allowed again.
func (l *loginLimiter) lockedOut(r *http.Request) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if rec := l.byIP[remoteHost(r)]; rec != nil {
		if d := rec.until.Sub(now); d > 0 {
			return d
		}
	}
	l.refillLocked(now)
	if l.tokens < 1 {
		return time.Duration((1 - l.tokens) / float64(l.perMinute) * float64(time.Minute))
	}
	return 0
}

// failed records a failed sign-in from r's address.
func (l *loginLimiter) failed(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, host := l.now(), remoteHost(r)
	l.refillLocked(now)
	l.tokens = max(l.tokens-1, -1) // concurrent checks may overdraw it by a little
	rec := l.byIP[host]
	if rec == nil {
		if len(l.byIP) >= loginMaxAddresses {
			for h, o := range l.byIP {
				if now.Sub(o.last) > loginForget && !now.Before(o.until) {
					delete(l.byIP, h)
				}
			}
			if len(l.byIP) >= loginMaxAddresses {
				return // full of live records: only the global bucket limits this address until some expire
			}
		}
		rec = &loginRecord{}
		l.byIP[host] = rec
	} else if now.Sub(rec.last) > loginForget {
		*rec = loginRecord{}
	}
	rec.failures++
	rec.last = now
	if n := rec.failures - loginFreeFailures + 1; n > 0 {
		lock := loginMaxLockout
		if n <= 20 {
			lock = min(l.lockout<<(n-1), loginMaxLockout)
		}
		rec.until = now.Add(lock)
	}
}

// succeeded clears r's address's record.
func (l *loginLimiter) succeeded(r *http.Request) {
	l.mu.Lock()
	delete(l.byIP, remoteHost(r))
	l.mu.Unlock()
}

// tooMany answers a locked-out address.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	http.Error(w, "too many failed sign-ins from this address; try again later", http.StatusTooManyRequests)
}
