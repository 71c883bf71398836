// Package pgembed runs a private PostgreSQL server from the machine's server
// binaries: it initialises a cluster once, starts the server on a private unix
// socket (and optionally on loopback TCP), recovers from a stale
// postmaster.pid and stops the server with a fast shutdown.
//
// initdb and postgres refuse to run as root, so when the process is root both
// run as the "postgres" system user (falling back to "nobody").
package pgembed

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// Options say where and how the server runs.
type Options struct {
	// Dir is the cluster directory (created and initialised when empty).
	Dir string
	// SocketDir holds the unix socket; default Dir/../run.
	SocketDir string
	// TCPPort, when non-zero, also listens on 127.0.0.1 at that port.
	TCPPort int
	// Ephemeral trades durability for speed (fsync off); for tests only.
	Ephemeral bool
	// Database is created on first start; default "compute".
	Database string
	Logger   *slog.Logger

	Port int // the port number used for the socket name (set by Start)
}

// Server is a running PostgreSQL server.
type Server struct {
	opts    Options
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	cred    *syscall.Credential
}

const superuser = "compute"

// FindBinaries returns the directory holding initdb and postgres: PATH first,
// then the newest /usr/lib/postgresql/*/bin.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		dir := filepath.Dir(resolve(p))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(resolve(p))
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries not found (install the Debian package: apt-get install -y postgresql)")
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func versionOf(p string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return v
}

// runAs returns the credential to run the server with, nil when not root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("running as root and neither the postgres nor the nobody user exists")
}

// Start initialises the cluster if needed and starts the server.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Database == "" {
		opts.Database = "compute"
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	if opts.SocketDir == "" {
		opts.SocketDir = filepath.Join(filepath.Dir(dir), "run")
	}
	if opts.SocketDir, err = filepath.Abs(opts.SocketDir); err != nil {
		return nil, err
	}
	// A unix socket path is limited to 107 bytes.
	if len(opts.SocketDir)+len("/.s.PGSQL.5432") > 100 {
		tmp, err := os.MkdirTemp("", "computed-pg-")
		if err != nil {
			return nil, err
		}
		opts.SocketDir = tmp
	}
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, cred: cred}
	if err := s.prepareDirs(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(ctx, bin); err != nil {
			return nil, err
		}
	}
	if err := s.clearStaleLock(ctx); err != nil {
		return nil, err
	}
	if err := s.start(ctx, bin); err != nil {
		return nil, err
	}
	if err := s.ensureDatabase(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// makeDir makes d the server's own directory (0700, its user's).
func (s *Server) makeDir(d string) error {
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) prepareDirs() error {
	for _, d := range []string{s.opts.Dir, s.opts.SocketDir} {
		if err := s.makeDir(d); err != nil {
			return err
		}
	}
	if s.cred != nil {
		// Every parent must be searchable by the server's user.
		for p := filepath.Dir(s.opts.Dir); p != "/" && p != "."; p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
					return fmt.Errorf("make %s searchable for the database user: %w", p, err)
				}
			}
		}
	}
	return nil
}

func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.opts.Dir
	cmd.Env = []string{"LC_ALL=C", "LANG=C", "PATH=/usr/bin:/bin", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	return cmd
}

// initdb makes the cluster in a directory of its own and renames it into
// place once complete: a start stopped during initdb (a SIGTERM half a
// second in) left PG_VERSION in the data directory and no database, and
// every later start waited 60 s for a server that could not start.
func (s *Server) initdb(ctx context.Context, bin string) error {
	if entries, err := os.ReadDir(s.opts.Dir); err != nil {
		return err
	} else if len(entries) > 0 {
		return fmt.Errorf("initdb: %s holds files but no database cluster (no PG_VERSION); move them away or remove the directory", s.opts.Dir)
	}
	tmp := s.opts.Dir + ".initdb"
	if err := os.RemoveAll(tmp); err != nil { // an earlier start's, stopped during initdb
		return err
	}
	if err := s.makeDir(tmp); err != nil {
		return err
	}
	args := []string{"-D", tmp, "-U", superuser, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if s.opts.Ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := s.command(ctx, filepath.Join(bin, "initdb"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Remove(s.opts.Dir); err != nil { // empty (above); Go renames onto no directory
		return fmt.Errorf("initdb: %w", err)
	}
	if err := os.Rename(tmp, s.opts.Dir); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	s.opts.Logger.Info("initialised database cluster", "dir", s.opts.Dir)
	return nil
}

// oldServerWait bounds the wait for a previous server of the same data
// directory to finish its shutdown checkpoint.
const oldServerWait = 60 * time.Second

// clearStaleLock deals with a postmaster.pid left behind. A server that no
// longer runs (a crash, a reboot that reused its PID) leaves a stale file,
// which is removed. A server still running whose parent died (kill -9 of
// the previous computed: the database got SIGINT and is writing its
// shutdown checkpoint) is waited for, and told to stop if it was not; a
// server whose parent lives belongs to another running instance, which is
// an error.
func (s *Server) clearStaleLock(ctx context.Context) error {
	pidFile := filepath.Join(s.opts.Dir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	if pid > 0 && isPostgres(pid) {
		if ppid := parentOf(pid); ppid > 1 && ppid != os.Getpid() && isAlive(ppid) && !orphanedTo(ppid) {
			return fmt.Errorf("the data directory %s is in use by a running database (pid %d)", s.opts.Dir, pid)
		}
		s.opts.Logger.Warn("waiting for the previous database server to stop", "pid", pid)
		_ = syscall.Kill(pid, syscall.SIGINT) // fast shutdown; a no-op if it is already stopping
		deadline := time.Now().Add(oldServerWait)
		for isPostgres(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("the previous database server (pid %d) did not stop within %s", pid, oldServerWait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		// It removed its own postmaster.pid on a clean shutdown.
		if _, err := os.Stat(pidFile); err != nil {
			return nil
		}
	}
	s.opts.Logger.Warn("removing stale postmaster.pid", "pid", pid)
	_ = os.Remove(pidFile)
	locks, _ := filepath.Glob(filepath.Join(s.opts.SocketDir, ".s.PGSQL.*"))
	for _, l := range locks {
		_ = os.Remove(l)
	}
	return nil
}

// parentOf reads a process's parent pid from /proc (0 when unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func isAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// orphanedTo says the process is a subreaper that adopted the orphan (a
// container's init or systemd --user), not a computed that runs it.
func orphanedTo(ppid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	cmd := string(b)
	return !strings.Contains(cmd, "computed") && !strings.Contains(cmd, ".test")
}

func isPostgres(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), "postgres")
}

func (s *Server) start(ctx context.Context, bin string) error {
	listen := ""
	port := 5432
	if s.opts.TCPPort != 0 {
		listen = "127.0.0.1"
		port = s.opts.TCPPort
	}
	args := []string{"-D", s.opts.Dir, "-k", s.opts.SocketDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=" + listen, "-c", "max_connections=200", "-c", "shared_buffers=128MB"}
	if s.opts.Ephemeral {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := s.command(context.Background(), filepath.Join(bin, "postgres"), args...)
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(s.opts.SocketDir), "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.opts.Port = port
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(s.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		db, err := sql.Open("pgx", s.url("postgres"))
		if err == nil {
			err = db.PingContext(ctx)
			db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited during start (%v); see postgres.log", s.waitErr)
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return errors.New("postgres did not accept connections within 60s")
		}
	}
}

func (s *Server) ensureDatabase(ctx context.Context) error {
	db, err := sql.Open("pgx", s.url("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, s.opts.Database).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	// Identifiers cannot be parameters; the name is ours, quoted.
	_, err = db.ExecContext(ctx, `CREATE DATABASE "`+strings.ReplaceAll(s.opts.Database, `"`, `""`)+`"`)
	return err
}

func (s *Server) url(database string) string {
	if s.opts.TCPPort != 0 {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, s.opts.TCPPort, database)
	}
	q := url.Values{"host": {s.opts.SocketDir}, "port": {strconv.Itoa(s.opts.Port)}, "sslmode": {"disable"}}
	return fmt.Sprintf("postgres://%s@/%s?%s", superuser, database, q.Encode())
}

// URL is the connection URL of the product's database.
func (s *Server) URL() string { return s.url(s.opts.Database) }

// AdminURL connects to the maintenance database.
func (s *Server) AdminURL() string { return s.url("postgres") }

// Exited is closed when the server's process has ended, whoever ended it
// (Stop, an operator's pg_ctl stop, a crash of the postmaster); Err then
// says how it ended.
func (s *Server) Exited() <-chan struct{} { return s.done }

// Err is how the server's process ended (after Exited is closed).
func (s *Server) Err() error {
	select {
	case <-s.done:
		if s.waitErr == nil {
			return errors.New("postgres exited")
		}
		return fmt.Errorf("postgres exited: %w", s.waitErr)
	default:
		return nil
	}
}

// Signal sends sig to the server's postmaster (a test's stand-in for an
// operator's pg_ctl).
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Stop shuts the server down (SIGINT: fast shutdown) and waits for it.
func (s *Server) Stop() error {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return nil
}
