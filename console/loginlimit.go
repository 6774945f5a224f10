package console

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed sign-ins (a wrong /login token, a wrong bearer token, wrong basic-auth
// credentials) are limited per remote address: after loginFreeFailures failures an
// address is locked out for Config.LoginLockout, doubling with each further failure up
// to loginMaxLockout; while locked out its credentials are not checked at all (answered
// 429 Too Many Requests with Retry-After). A successful sign-in clears the address's
// record; a record is forgotten loginForget after its last failure. Behind a reverse
// proxy every client shares the proxy's address.
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
}

func newLoginLimiter(lockout time.Duration) *loginLimiter {
	return &loginLimiter{lockout: lockout, byIP: map[string]*loginRecord{}, now: time.Now}
}

func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// lockedOut reports how long the address of r must still wait (0: it may try).
func (l *loginLimiter) lockedOut(r *http.Request) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec := l.byIP[remoteHost(r)]; rec != nil {
		if d := rec.until.Sub(l.now()); d > 0 {
			return d
		}
	}
	return 0
}

// failed records a failed sign-in from r's address.
func (l *loginLimiter) failed(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, host := l.now(), remoteHost(r)
	rec := l.byIP[host]
	if rec == nil {
		if len(l.byIP) >= loginMaxAddresses {
			for h, o := range l.byIP {
				if now.Sub(o.last) > loginForget && !now.Before(o.until) {
					delete(l.byIP, h)
				}
			}
			if len(l.byIP) >= loginMaxAddresses {
				return // full of live records: this address goes untracked until some expire
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
