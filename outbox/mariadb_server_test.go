package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
)

// mariaDBServer is a MariaDB server of the test's own (mariadb-install-db in a temporary
// directory, mariadbd on a free 127.0.0.1 port, no grant tables), so a campaign can crash
// and restart it without touching a shared server.
type mariaDBServer struct {
	DSN  string // root, database "outbox"
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	log  bytes.Buffer
}

// startMariaDB starts the server, or skips t when mariadbd / mariadb-install-db are
// missing or the test does not run as root.
func startMariaDB(t testing.TB) *mariaDBServer {
	t.Helper()
	bin, err1 := exec.LookPath("mariadbd")
	if err1 != nil {
		bin, err1 = exec.LookPath("/usr/sbin/mariadbd")
	}
	install, err2 := exec.LookPath("mariadb-install-db")
	if err1 != nil || err2 != nil || os.Geteuid() != 0 {
		t.Skip("outbox: needs root, mariadbd and mariadb-install-db to run a MariaDB of the test's own; skipping its restart")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--user=root",
		"--skip-test-db", "--auth-root-authentication-method=normal").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v: %s", err, out)
	}
	m := &mariaDBServer{bin: bin, dir: dir, port: sqltest.FreePort(t)}
	m.DSN = fmt.Sprintf("root@tcp(127.0.0.1:%d)/outbox", m.port)
	t.Cleanup(m.kill)
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.port))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE outbox"); err != nil {
		t.Fatal(err)
	}
	return m
}

// start starts mariadbd and waits up to 60 s until it accepts connections.
func (m *mariaDBServer) start() error {
	m.cmd = exec.Command(m.bin, "--no-defaults", "--datadir="+filepath.Join(m.dir, "data"), fmt.Sprintf("--port=%d", m.port),
		"--bind-address=127.0.0.1", "--socket="+filepath.Join(m.dir, "sock"), "--user=root", "--skip-grant-tables",
		"--innodb-use-native-aio=0", "--max-connections=200")
	m.cmd.Stdout, m.cmd.Stderr = &m.log, &m.log
	if err := m.cmd.Start(); err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", m.port)
	if !testkit.Eventually(60*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		return fmt.Errorf("mariadbd not accepting connections on %s within 60 s: %s", addr, m.log.String())
	}
	return nil
}

// kill stops the server with SIGKILL (a crash: InnoDB recovers from its redo log at the
// next start).
func (m *mariaDBServer) kill() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		_ = m.cmd.Wait()
		m.cmd = nil
	}
}

// crash kills the server and starts it again.
func (m *mariaDBServer) crash() error {
	m.kill()
	return m.start()
}
