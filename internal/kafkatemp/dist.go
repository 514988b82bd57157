// Package kafkatemp runs throwaway Apache Kafka brokers for tests,
// benchmarks and local development: the real broker, not an imitation.
//
// Resolve fetches a pinned Kafka release's jars from Maven Central with
// Maven (`mvn dependency:copy-dependencies`) into a cache directory, once
// per version; Start formats KRaft storage for one broker or a cluster of
// them (each node is a combined broker and controller with a static
// controller.quorum.voters) in a fresh temporary directory, starts the
// JVMs on free loopback ports and returns once every broker is registered.
// Cluster.Close stops them by PID and removes the directory. Nothing is
// installed system-wide.
//
// It needs `java` (17 or later) and `mvn` on the PATH; Resolve returns a
// *MissingToolError naming what to install otherwise. Each broker takes
// about 400 MB of memory and several seconds of CPU to start; its JIT makes
// the first seconds slow, so benchmarks warm it up before measuring.
//
// The JVMs are children of the calling process, started with
// PR_SET_PDEATHSIG on Linux, so they do not outlive a crashed caller.
package kafkatemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The Kafka versions this project tests against. V44 is the default.
const (
	V44 = "4.4.0"
	V39 = "3.9.1"
)

// Versions lists the tested versions, newest first.
var Versions = []string{V44, V39}

// Logging jars resolved with every version: the 4.x broker logs through
// SLF4J 2 and logs nothing without a binding; 3.9 works with the same.
const (
	slf4jVersion = "2.0.17"
	log4jVersion = "2.24.3"
)

// EnvCache names the cache directory (default: the user cache directory's
// pgoutbox/kafka, e.g. ~/.cache/pgoutbox/kafka).
const EnvCache = "OUTBOX_KAFKA_CACHE"

// Dist is a resolved Kafka release: a directory of jars.
type Dist struct {
	// Version is the Kafka version, e.g. "4.4.0".
	Version string
	// Lib is the directory holding every jar the broker needs; the JVM's
	// class path is Lib/*.
	Lib string
}

// MissingToolError says that a program Resolve or Start needs is not on
// the PATH, and how to install it.
type MissingToolError struct {
	// Tool is the program: "java" or "mvn".
	Tool string
	// Install says how to get it on Debian.
	Install string
}

func (e *MissingToolError) Error() string {
	return fmt.Sprintf("kafkatemp: %s not found on the PATH: install it (%s) to run a real Kafka broker", e.Tool, e.Install)
}

// IsMissingTool reports whether err wraps a *MissingToolError.
func IsMissingTool(err error) bool {
	var m *MissingToolError
	return errors.As(err, &m)
}

// CacheDir returns the directory Resolve caches jars in: $OUTBOX_KAFKA_CACHE
// if set, else the user cache directory's pgoutbox/kafka, else the system
// temporary directory's pgoutbox-kafka.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "pgoutbox", "kafka")
	}
	return filepath.Join(os.TempDir(), "pgoutbox-kafka")
}

// CheckTools returns a *MissingToolError when java or mvn is missing.
func CheckTools() error {
	if _, err := exec.LookPath("java"); err != nil {
		return &MissingToolError{Tool: "java", Install: "apt-get install openjdk-17-jre-headless"}
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return &MissingToolError{Tool: "mvn", Install: "apt-get install maven"}
	}
	return nil
}

// Resolve returns the jars of Kafka version, fetching them from Maven
// Central into CacheDir()/version/lib the first time (about a minute).
// Concurrent calls, in this process or others, fetch once: they serialize
// on a lock file. A version other than those in Versions works if Maven
// Central serves it.
func Resolve(ctx context.Context, version string) (*Dist, error) {
	if version == "" {
		version = V44
	}
	if err := CheckTools(); err != nil {
		return nil, err
	}
	dir := filepath.Join(CacheDir(), version)
	lib := filepath.Join(dir, "lib")
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return &Dist{Version: version, Lib: lib}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkatemp: cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(done); err == nil {
		return &Dist{Version: version, Lib: lib}, nil
	}
	if err := os.RemoveAll(lib); err != nil {
		return nil, fmt.Errorf("kafkatemp: cache: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pom.xml"), []byte(pom(version)), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatemp: cache: %w", err)
	}
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", filepath.Join(dir, "pom.xml"),
		"dependency:copy-dependencies", "-DoutputDirectory="+lib, "-DincludeScope=runtime")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kafkatemp: resolve Kafka %s from Maven Central: %w: %s", version, err, tail(out.String(), 2048))
	}
	jars, _ := filepath.Glob(filepath.Join(lib, "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return nil, fmt.Errorf("kafkatemp: resolve Kafka %s: no kafka_2.13 jar in %s", version, lib)
	}
	if err := os.WriteFile(done, []byte(version+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatemp: cache: %w", err)
	}
	return &Dist{Version: version, Lib: lib}, nil
}

// pom is the Maven project whose runtime dependencies are a broker's class
// path: the broker (kafka_2.13, which brings the server, raft, metadata and
// storage modules) and an SLF4J 2 binding to log4j2.
func pom(version string) string {
	dep := func(g, a, v string) string {
		return fmt.Sprintf("    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n", g, a, v)
	}
	return `<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pgoutbox.kafkatemp</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>` + version + `</version>
  <packaging>pom</packaging>
  <dependencies>
` + dep("org.slf4j", "slf4j-api", slf4jVersion) +
		dep("org.apache.kafka", "kafka_2.13", version) +
		dep("org.apache.logging.log4j", "log4j-slf4j2-impl", log4jVersion) +
		dep("org.apache.logging.log4j", "log4j-core", log4jVersion) + `  </dependencies>
</project>
`
}

// lockFile takes an exclusive flock on path, waiting until ctx ends.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafkatemp: lock: %w", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-locked:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("kafkatemp: lock %s: %w", path, err)
		}
		return func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		}, nil
	case <-ctx.Done():
		f.Close() // the flock call fails on the closed descriptor
		return nil, fmt.Errorf("kafkatemp: lock %s: %w", path, ctx.Err())
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
