package sqltest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RedisServer is a redis-server process of the test's own (no persistence), so a test can
// stop and restart it without touching a shared Redis.
type RedisServer struct {
	Addr string
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server (from PATH) on a free 127.0.0.1 port, or skips t when
// there is none. It is stopped in t's cleanup.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("sqltest: no redis-server in PATH; skipping (a Redis of the test's own is needed to restart it)")
	}
	port := FreePort(t)
	r := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, port: port, dir: t.TempDir()}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Start starts the server (again) on its port and waits up to 10 s until it accepts
// connections.
func (r *RedisServer) Start() error {
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		return err
	}
	return waitPort(r.Addr, 10*time.Second)
}

// Kill stops the server with SIGKILL (its data is lost: no persistence) and waits for it.
func (r *RedisServer) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Stop is Kill; for t.Cleanup.
func (r *RedisServer) Stop() { r.Kill() }

// PostgresServer is a PostgreSQL cluster of the test's own (initdb in a temporary
// directory, run as the postgres user through runuser, as .ci/provision does), so a test
// can restart it.
type PostgresServer struct {
	// DSN connects as the superuser postgres (trust authentication) to database postgres.
	DSN string
	bin string
	dir string
	log string
	opt string
}

// StartPostgres initialises and starts a PostgreSQL cluster on a free 127.0.0.1 port, or
// skips t when the binaries (/usr/lib/postgresql/*/bin), runuser or the postgres user are
// missing. It is stopped and removed in t's cleanup.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		t.Skip("sqltest: no /usr/lib/postgresql/*/bin/postgres; skipping (a PostgreSQL of the test's own is needed to restart it)")
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Skip("sqltest: no runuser; skipping (PostgreSQL must run as the postgres user)")
	}
	u, err := user.Lookup("postgres")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("sqltest: need root and a postgres user to run a PostgreSQL of the test's own; skipping")
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	p := &PostgresServer{
		DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		bin: filepath.Dir(bins[len(bins)-1]), dir: dir, log: filepath.Join(dir, "log"),
		opt: fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c max_connections=100", port, dir),
	}
	t.Cleanup(func() {
		_ = p.pgctl("stop", "-m", "immediate")
		_ = os.RemoveAll(dir)
	})
	if out, err := p.run("initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres"); err != nil {
		t.Fatalf("sqltest: initdb: %v: %s", err, out)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *PostgresServer) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(p.bin, prog)}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (p *PostgresServer) pgctl(args ...string) error {
	out, err := p.run("pg_ctl", append([]string{"-D", filepath.Join(p.dir, "data"), "-l", p.log, "-w", "-t", "30"}, args...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w: %s", args, err, out)
	}
	return nil
}

// Start starts the server and waits until it accepts connections (pg_ctl -w, 30 s).
func (p *PostgresServer) Start() error { return p.pgctl("start", "-o", p.opt) }

// Crash stops the server in immediate mode (no shutdown checkpoint, clients cut off, as a
// crash would; it recovers from its WAL on the next start).
func (p *PostgresServer) Crash() error { return p.pgctl("stop", "-m", "immediate") }

// Open opens the server's database with the pgx driver, closed in t's cleanup.
func (p *PostgresServer) Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func waitPort(addr string, d time.Duration) error {
	var err error
	if testkit.EventuallyEvery(d, 20*time.Millisecond, func() bool {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		return nil
	}
	return fmt.Errorf("sqltest: %s not accepting connections after %v: %w", addr, d, err)
}
