package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Machine describes where the benchmark ran.
type Machine struct {
	// CPU is the processor model (from /proc/cpuinfo).
	CPU string `json:"cpu"`
	// Cores is the number of logical CPUs Go sees.
	Cores int `json:"cores"`
	// MemoryMB is the total memory, in MiB.
	MemoryMB int64 `json:"memory_mb"`
	// Kernel is the OS kernel release.
	Kernel string `json:"kernel"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	// GoVersion is the Go toolchain that built the bench.
	GoVersion string `json:"go_version"`
	// Postgres is the server's version() string; PostgresFsync its fsync
	// setting; PostgresSynchronousCommit its synchronous_commit.
	Postgres                  string `json:"postgres"`
	PostgresFsync             string `json:"postgres_fsync"`
	PostgresSynchronousCommit string `json:"postgres_synchronous_commit"`
	// PostgresSource is "pgtemp" (throwaway, started by the bench) or
	// "external".
	PostgresSource string `json:"postgres_source"`
	// Broker is "kfake" (in-process), "Apache Kafka 4.4.0" (a real broker
	// the bench started, internal/kafkatemp) or "external".
	Broker string `json:"broker"`
	// BrokerJVMFlags are the JVM options of a real broker the bench
	// started; BrokerCPUs the CPUs it was pinned to ("" for none);
	// BrokerWarmup what warmed it up before the first run.
	BrokerJVMFlags []string `json:"broker_jvm_flags,omitempty"`
	BrokerCPUs     string   `json:"broker_cpus,omitempty"`
	BrokerWarmup   string   `json:"broker_warmup,omitempty"`
	// DBCPUSource says where the database's CPU time comes from (the
	// postmaster's PID and /proc), or why it is unavailable (a server
	// whose processes this machine's /proc does not show).
	DBCPUSource string `json:"db_cpu_source,omitempty"`
	// Hostname of the machine.
	Hostname string `json:"hostname"`
}

// DescribeMachine collects the machine's description; database fields come
// from dsn (empty: left out). It never fails: unknown fields stay empty.
func DescribeMachine(ctx context.Context, dsn string) Machine {
	m := Machine{
		Cores:     runtime.NumCPU(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
	}
	m.Hostname, _ = os.Hostname()
	m.CPU = procField("/proc/cpuinfo", "model name")
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		if kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil {
			m.MemoryMB = kb / 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if dsn != "" {
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			_ = conn.QueryRow(ctx, "SELECT version(), current_setting('fsync'), current_setting('synchronous_commit')").
				Scan(&m.Postgres, &m.PostgresFsync, &m.PostgresSynchronousCommit)
			conn.Close(ctx)
		}
		if p, err := newCostProbe(ctx, dsn); err == nil {
			m.DBCPUSource = p.cpuNote
			p.Close()
		} else {
			m.DBCPUSource = "unavailable: " + err.Error()
		}
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "".
func procField(file, key string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// rssMB returns the process's VmRSS and VmHWM (peak RSS) in MiB, from
// /proc/self/status; zeros where unavailable.
func rssMB() (rss, hwm float64) {
	kb := func(key string) float64 {
		v := procField("/proc/self/status", key)
		if f := strings.Fields(v); len(f) > 0 {
			n, _ := strconv.ParseFloat(f[0], 64)
			return n / 1024
		}
		return 0
	}
	return kb("VmRSS"), kb("VmHWM")
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0+:
// /proc/self/clear_refs "5"); it reports whether that worked.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
