package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a server process the benchmark started and measures.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// start runs bin with args and env (added to this process's environment),
// its output in logPath. The child dies with the benchmark.
func start(name, logPath, dir, bin string, args, env []string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop asks the process to stop (SIGTERM), then kills it after 20 s.
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

// waitHTTP polls url until it answers 2xx, the process exits or 90 s pass.
func (p *proc) waitHTTP(ctx context.Context, url string, post string) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var resp *http.Response
		var err error
		if post == "" {
			resp, err = http.Get(url)
		} else {
			resp, err = http.Post(url, "application/json", strings.NewReader(post))
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start; see %s", p.name, p.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer %s within 90 s; see %s", p.name, url, p.log.Name())
}

// cpu is the CPU time so far of the process and of its children, live
// (PostGraphile's cluster workers) or reaped: user+system, as
// /proc/<pid>/stat reports it, threads included.
func (p *proc) cpu() time.Duration {
	pid := p.cmd.Process.Pid
	total := pidCPU(pid, true)
	for _, c := range children(pid) {
		total += pidCPU(c, false)
	}
	return total
}

// peakRSS is the peak resident memory (VmHWM) of the process plus that of
// each of its live children.
func (p *proc) peakRSS() int64 {
	pid := p.cmd.Process.Pid
	total := vmHWM(pid)
	for _, c := range children(pid) {
		total += vmHWM(c)
	}
	return total
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// children are the live processes whose parent is pid.
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err == nil && pidParent(c) == pid {
			out = append(out, c)
		}
	}
	return out
}

var clockTick = 100.0 // sysconf(_SC_CLK_TCK) on Linux

// statFields are the fields of /proc/<pid>/stat after the command name
// (field 2, which may hold spaces): f[0] is field 3 (state); nil when the
// process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// pidCPU reads utime+stime of pid, and with children the CPU time of its
// children that it has waited for (cutime+cstime).
func pidCPU(pid int, children bool) time.Duration {
	// utime, stime, cutime and cstime are fields 14 to 17.
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	var ticks float64
	last := 12
	if children {
		last = 14
	}
	for i := 11; i <= last; i++ {
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return time.Duration(ticks / clockTick * float64(time.Second))
}

func pidParent(pid int) int {
	f := statFields(pid) // field 4 is the parent's pid
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// postgresCPU is the CPU time of the cluster: the postmaster (from
// postmaster.pid) with the children it has reaped (backends that ended),
// and its children alive now (the backends the pools keep open, and the
// background processes).
func postgresCPU(clusterDir string) time.Duration {
	f, err := os.Open(filepath.Join(clusterDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	pm, _ := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if pm == 0 {
		return 0
	}
	total := pidCPU(pm, true)
	for _, c := range children(pm) {
		total += pidCPU(c, false)
	}
	return total
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
