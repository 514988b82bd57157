package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// buildRelay builds this command into a temporary directory and returns
// the binary's path. -buildvcs=auto overrides a GOFLAGS=-buildvcs=false:
// the revision is stamped when the source is a git checkout.
func buildRelay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// runBinary runs the built command with args and env (added to a copy of
// the environment without DATABASE_URL and OUTBOX_*), and returns its exit
// code, stdout and stderr.
func runBinary(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "OUTBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("%s %v: %v", bin, args, err)
	return -1, "", ""
}

func lines(s string) int { return strings.Count(strings.TrimRight(s, "\n"), "\n") + 1 }

// The case, on the real binary: a flag value that does not parse
// is one line naming the flag, the value and the expected form, exit 2,
// and no usage dump.
func TestBadFlagValueIsOneLineOnTheBinary(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	code, stdout, stderr := runBinary(t, bin, nil, "run", "--lease", "30")
	want := `outbox-relay run: --lease: invalid value "30": want a duration with a unit, e.g. 30s; see outbox-relay run --help`
	if code != exitUsage || stdout != "" || strings.TrimSpace(stderr) != want {
		t.Fatalf("run --lease 30: exit %d, %d lines on stderr:\n%s\nwant exit 2 and the one line\n%s", code, lines(stderr), stderr, want)
	}
	code, stdout, stderr = runBinary(t, bin, nil, "run", "--foo")
	want = `outbox-relay run: unknown flag --foo; see outbox-relay run --help`
	if code != exitUsage || stdout != "" || strings.TrimSpace(stderr) != want {
		t.Fatalf("run --foo: exit %d, %d lines on stderr:\n%s\nwant exit 2 and the one line\n%s", code, lines(stderr), stderr, want)
	}
}

func TestFlagErrorsNameTheFlagTheValueAndTheForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--lease", "30"}, []string{`--lease: invalid value "30": want a duration with a unit, e.g. 30s`}},
		{[]string{"run", "--retention", "7d"}, []string{`--retention: invalid value "7d": want a duration with a unit, e.g. 30s (units: ms, s, m, h; no d: 7d is 168h)`}},
		{[]string{"run", "--poll-interval=fast"}, []string{`--poll-interval: invalid value "fast": want a duration with a unit, e.g. 30s`}},
		{[]string{"run", "--batch-size", "ten"}, []string{`--batch-size: invalid value "ten": want an integer`}},
		{[]string{"run", "--no-notify=yes"}, []string{`--no-notify: invalid value "yes": want true or false`, "1, 0, t, f"}},
		{[]string{"run", "--lease"}, []string{`--lease: needs a value`, "a duration with a unit"}},
		{[]string{"run", "--no-notify", "false"}, []string{`unexpected argument "false"`, "--no-notify=false"}},
		{[]string{"run", "--foo"}, []string{"unknown flag --foo; see outbox-relay run --help"}},
		{[]string{"run", "-foo=1"}, []string{"unknown flag --foo; see outbox-relay run --help"}},
		{[]string{"status", "--foo"}, []string{"unknown flag --foo; see outbox-relay status --help"}},
		{[]string{"migrate", "--lease", "5s"}, []string{"unknown flag --lease; see outbox-relay migrate --help"}},
		{[]string{"inspect", "--json=maybe"}, []string{`--json: invalid value "maybe": want true or false`}},
		{[]string{"requeue", "--all-dead-letters", "--event-id"}, []string{"--event-id: needs a value"}},
		{[]string{"run", "--table", "", "--database-url", "postgres://u@127.0.0.1:1/d", "--brokers", "127.0.0.1:1", "--topic", "t"}, []string{`--table: "" is not a table or schema.table name`}},
		{[]string{"status", "--table", ""}, []string{`--table: "" is not a table or schema.table name`}},
		{[]string{"migrate", "--table", "a.b.c"}, []string{`--table: "a.b.c" is not a table or schema.table name`}},
		{[]string{"inspect", "--table", "s.", "--event-id", "1"}, []string{`--table: "s." is not a table or schema.table name`}},
	} {
		code, stdout, stderr := runMain(t, context.Background(), tc.args...)
		if code != exitUsage || stdout != "" || lines(stderr) > 2 || strings.Contains(stderr, "Usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr (%d lines):\n%s\nwant exit 2, nothing on stdout, at most 2 lines and no usage", tc.args, code, stdout, lines(stderr), stderr)
			continue
		}
		for _, w := range append(tc.want, "--help") {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
	}
}

// TestFormatFlagErrorsNameTheFlag: a bad value format setting exits 2
// naming the flag, before anything is contacted.
func TestFormatFlagErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	run := []string{"run", "--database-url", "postgres://u@127.0.0.1:1/d", "--brokers", "127.0.0.1:1", "--topic", "t"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(run, "--value-format", "avro"), `--schema-registry-url: empty: --value-format "avro" needs a Schema Registry`},
		{append(run, "--value-format", "xml"), `--value-format: "xml": want json, avro, protobuf or json-schema`},
		{append(run, "--schema-registry-url", "http://r:8081"), `--schema-registry-url: set, but --value-format "json" uses no registry`},
		{append(run, "--value-format", "avro", "--schema-registry-url", "http://r:8081", "--subject-name-strategy", "name"), `--subject-name-strategy: "name": want topic, record or topic-record`},
		{[]string{"inspect", "--event-id", "1", "--value-format", "avro", "--schema-registry-url", "registry:8081"}, `--schema-registry-url: "registry:8081": want http://host:port`},
	} {
		code, stdout, stderr := runMain(t, context.Background(), tc.args...)
		if code != exitUsage || stdout != "" || lines(stderr) != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want exit 2 and one line saying %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// A password holding '#' or '@' unencoded leaves them in the URL's host:
// each command stops at once with exit 2, says to percent-encode, and
// prints no part of the password (it used to retry a DNS lookup of
// "ss#1@127.0.0.1" for --startup-wait, logging it).
func TestUnencodedPasswordInTheURLIsNamed(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://relay:p@ss#1@127.0.0.1:1/postgres?sslmode=disable",
		"postgres://relay:s3cr3t@p4rt@127.0.0.1:1/postgres",
		"postgres://relay:x@h1:1,q#w@h2:2/postgres",
	} {
		for _, cmd := range []string{"run", "migrate", "status"} {
			code, stdout, stderr := runMain(t, context.Background(), cmd, "--database-url", dsn, "--brokers", "127.0.0.1:1",
				"--topic", "t", "--metrics-addr", "", "--startup-wait", "2s")
			if cmd != "run" {
				code, stdout, stderr = runMain(t, context.Background(), cmd, "--database-url", dsn)
			}
			if code != exitUsage || stdout != "" || lines(stderr) > 1 || !strings.Contains(stderr, "percent-encode") || !strings.Contains(stderr, "%40") {
				t.Errorf("%s with %q: exit %d, stdout %q, stderr %q; want exit 2 and one line saying to percent-encode", cmd, dsn, code, stdout, stderr)
			}
			for _, secret := range []string{"ss#1", "p4rt", "q#w"} {
				if strings.Contains(stderr, secret) {
					t.Errorf("%s: stderr %q holds %q, a part of the password", cmd, stderr, secret)
				}
			}
		}
	}
}

func TestHelpOnEveryCommandGoesToStdout(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "migrate", "adopt", "requeue", "status", "inspect", "version"} {
		for _, h := range []string{"-h", "--help", "-help"} {
			code, stdout, stderr := runMain(t, context.Background(), cmd, h)
			if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "Usage: outbox-relay "+cmd) {
				t.Errorf("%s %s: exit %d, stderr %q, stdout %.80q; want exit 0 and the usage on stdout only", cmd, h, code, stderr, stdout)
			}
		}
		code, stdout, stderr := runMain(t, context.Background(), "help", "--help")
		if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "outbox-relay publishes") {
			t.Errorf("help --help: exit %d, stderr %q, stdout %.80q; want the command list", code, stderr, stdout)
		}
		code, stdout, stderr = runMain(t, context.Background(), "help", cmd)
		if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "Usage: outbox-relay "+cmd) {
			t.Errorf("help %s: exit %d, stderr %q, stdout %.80q", cmd, code, stderr, stdout)
		}
	}
	// The run usage lists units, defaults and environment variables.
	_, stdout, _ := runMain(t, context.Background(), "run", "--help")
	for _, w := range []string{"--lease duration", "(default 30s)", "[env OUTBOX_LEASE]", "--startup-wait"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("run --help lacks %q", w)
		}
	}
}

func TestNoArgumentsListsTheCommands(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runMain(t, context.Background())
	if code != exitOK || stderr != "" {
		t.Fatalf("no arguments: exit %d, stderr %q; want exit 0 and the command list", code, stderr)
	}
	for _, w := range []string{"Usage:", "outbox-relay run [flags]", "migrate", "requeue", "adopt", "status", "inspect", "version"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("command list lacks %q:\n%s", w, stdout)
		}
	}
	if code, _, stderr := runMain(t, context.Background(), "frobnicate"); code != exitUsage || lines(stderr) > 2 ||
		!strings.Contains(stderr, `unknown command "frobnicate"`) || !strings.Contains(stderr, "outbox-relay --help") {
		t.Errorf("unknown command: exit %d, stderr:\n%s", code, stderr)
	}
}

// goVersionM returns the build settings `go version -m` reads from bin.
func goVersionM(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "mod":
			m["mod"] = f[1] + " " + f[2]
		case len(f) >= 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				m[k] = v
			}
		}
	}
	return m
}

func TestVersionPrintsModuleVersionAndRevision(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	info := goVersionM(t, bin)
	code, byCommand, stderr := runBinary(t, bin, nil, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("version: exit %d, stderr %q", code, stderr)
	}
	code, byFlag, stderr := runBinary(t, bin, nil, "--version")
	if code != 0 || stderr != "" || byFlag != byCommand {
		t.Fatalf("--version: exit %d, stderr %q, stdout %q; want what version prints:\n%s", code, stderr, byFlag, byCommand)
	}
	mod := strings.Fields(info["mod"]) // path, version
	if len(mod) != 2 || !strings.HasPrefix(byCommand, "outbox-relay "+mod[1]+"\n") || !strings.Contains(byCommand, mod[0]) {
		t.Errorf("version output lacks module %q:\n%s", info["mod"], byCommand)
	}
	if rev := info["vcs.revision"]; rev != "" {
		if !strings.Contains(byCommand, "revision: "+rev) {
			t.Errorf("version output lacks revision %s:\n%s", rev, byCommand)
		}
		if want := "modified: " + info["vcs.modified"]; !strings.Contains(byCommand, want) {
			t.Errorf("version output lacks %q:\n%s", want, byCommand)
		}
	} else if !strings.Contains(byCommand, "revision: unknown") {
		t.Errorf("binary has no VCS revision (go version -m: %v); output should say so:\n%s", info, byCommand)
	}

	// The container image's build: no VCS stamp, the revision given at link
	// time as the Dockerfile does.
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "-X main.vcsRevision=${VCS_REVISION}") || !strings.Contains(string(df), "-buildvcs=false") {
		t.Fatalf("the Dockerfile no longer builds with -buildvcs=false and -X main.vcsRevision; adjust this test")
	}
	image := filepath.Join(t.TempDir(), "outbox-relay")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-X main.vcsRevision=0123abcd", "-o", image, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if code, out, _ := runBinary(t, image, nil, "--version"); code != 0 || !strings.Contains(out, "revision: 0123abcd (given at build time") {
		t.Errorf("-buildvcs=false -X main.vcsRevision=0123abcd: exit %d\n%s", code, out)
	}
}

// The container image runs the binary with its default CMD and the
// configuration in the environment: that must keep running the relay, not
// print the command list.
func TestContainerDefaultCommandRunsTheRelay(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]$`).FindSubmatch(df)
	cmd := regexp.MustCompile(`(?m)^CMD \[(.*)\]$`).FindSubmatch(df)
	if entry == nil || !strings.HasSuffix(string(entry[1]), "/outbox-relay") || cmd == nil {
		t.Fatalf("Dockerfile: ENTRYPOINT %q, CMD %q; want the outbox-relay binary and a default command", entry, cmd)
	}
	var args []string
	for _, a := range regexp.MustCompile(`"([^"]*)"`).FindAllSubmatch(cmd[1], -1) {
		args = append(args, string(a[1]))
	}
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("Dockerfile CMD %q: the default command must be run", cmd[1])
	}
	// The image configured by the environment, as its header shows.
	t.Setenv("DATABASE_URL", "postgres://u@127.0.0.1:1/db")
	t.Setenv("OUTBOX_TOPIC", "events")
	t.Setenv("OUTBOX_BROKERS", "")
	code, stdout, stderr := runMain(t, context.Background(), args...)
	if code != exitUsage || !strings.Contains(stderr, "--brokers: required") || stdout != "" {
		t.Fatalf("image default command %q: exit %d, stdout %q, stderr %q; want run's own check of --brokers", args, code, stdout, stderr)
	}
}

func TestMigrateStartupWait(t *testing.T) {
	t.Parallel()
	down := "postgres://u@127.0.0.1:1/db?connect_timeout=1"
	for _, fl := range []string{"--startup-wait", "--wait"} {
		start := time.Now()
		code, _, stderr := runMain(t, context.Background(), "migrate", "--database-url", down, fl, "1500ms")
		if code != exitFailure || !strings.Contains(stderr, "database not reachable yet; retrying") || time.Since(start) < time.Second {
			t.Errorf("migrate %s 1500ms: exit %d after %s, stderr %q; want retries, then exit 1", fl, code, time.Since(start), stderr)
		}
	}
	// Without either it fails at once, as before.
	start := time.Now()
	if code, _, stderr := runMain(t, context.Background(), "migrate", "--database-url", down); code != exitFailure || strings.Contains(stderr, "retrying") || time.Since(start) > 5*time.Second {
		t.Errorf("migrate: exit %d after %s, stderr %q; want exit 1 at once", code, time.Since(start), stderr)
	}
	if code, _, stderr := runMain(t, context.Background(), "migrate", "--database-url", down, "--wait", "1s", "--startup-wait", "2s"); code != exitUsage || !strings.Contains(stderr, "--startup-wait") {
		t.Errorf("both names: exit %d, stderr %q; want exit 2", code, stderr)
	}
	_, stdout, _ := runMain(t, context.Background(), "migrate", "--help")
	if !regexp.MustCompile(`--startup-wait duration`).MatchString(stdout) || !regexp.MustCompile(`--wait duration\n.*deprecated.*--startup-wait`).MatchString(stdout) {
		t.Errorf("migrate --help does not document --startup-wait and the deprecated --wait:\n%s", stdout)
	}
}

func TestBrokersNeedANumericPort(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"localhost:abc", "localhost:0", "localhost:70000", "localhost:9092,kafka2", "localhost:", ":9092"} {
		code, _, stderr := runMain(t, context.Background(), "run", "--database-url", "postgres://u@127.0.0.1:1/db", "--topic", "t",
			"--startup-wait", "1s", "--metrics-addr", "", "--brokers", b)
		if code != exitUsage || !strings.Contains(stderr, "--brokers") {
			t.Errorf("--brokers %s: exit %d, stderr %q; want exit 2 naming --brokers", b, code, stderr)
		}
	}
}

// Zero would silently mean the default for these: refused, naming the
// flag (or the environment variable that set it).
func TestZeroIntervalsAreRefused(t *testing.T) {
	valid := []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t", "--startup-wait", "1s", "--metrics-addr", ""}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-interval", "0"}, "--metrics-interval: must be positive"},
		{[]string{"--kafka-write-timeout", "0s"}, "--kafka-write-timeout: must be positive"},
		{[]string{"--linger", "0"}, "--linger: 0 is refused"},
		{[]string{"--claim-window", "0"}, "--claim-window: 0 is refused"},
	} {
		code, _, stderr := runMain(t, context.Background(), append(append([]string{}, valid...), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	t.Setenv("OUTBOX_LINGER", "0")
	if code, _, stderr := runMain(t, context.Background(), valid...); code != exitUsage || !strings.Contains(stderr, "OUTBOX_LINGER") || !strings.Contains(stderr, "negative") {
		t.Errorf("OUTBOX_LINGER=0: exit %d, stderr %q; want exit 2 naming OUTBOX_LINGER and how to turn lingering off", code, stderr)
	}
}

func TestKafkaTLSAndSASLErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "x.pem")
	valid := []string{"run", "--database-url", db.ConnString, "--brokers", "127.0.0.1:1", "--topic", "t", "--startup-wait", "10s", "--metrics-addr", ""}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka-tls", "--kafka-tls-ca", missing}, "--kafka-tls-ca: open " + missing + ": no such file or directory"},
		{[]string{"--kafka-tls", "--kafka-tls-ca", garbage}, "--kafka-tls-ca: " + garbage + ": no PEM certificates"},
		{[]string{"--kafka-tls", "--kafka-tls-cert", missing, "--kafka-tls-key", garbage}, "--kafka-tls-cert: open " + missing + ": no such file or directory"},
		{[]string{"--kafka-tls", "--kafka-tls-cert", garbage, "--kafka-tls-key", missing}, "--kafka-tls-key: open " + missing + ": no such file or directory"},
		{[]string{"--kafka-tls", "--kafka-tls-cert", garbage, "--kafka-tls-key", garbage}, "--kafka-tls-cert: "},
		{[]string{"--kafka-tls-ca", garbage}, "--kafka-tls-ca: set without --kafka-tls"},
		{[]string{"--kafka-tls", "--kafka-tls-cert", garbage}, "--kafka-tls-key: empty but --kafka-tls-cert is set"},
		{[]string{"--kafka-sasl-mechanism", "PLAIN"}, "--kafka-sasl-username: empty with --kafka-sasl-mechanism PLAIN"},
		{[]string{"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-username", "a\x07b"}, "--kafka-sasl-username: "},
	} {
		code, _, stderr := runMain(t, context.Background(), append(append([]string{}, valid...), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "Config.") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q (no Config.Field names)", tc.args, code, stderr, tc.want)
		}
	}
}

// Not parallel: it sets process environment variables.
func TestBadEnvironmentValuesNameTheVariable(t *testing.T) {
	args := []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t", "--startup-wait", "1s", "--metrics-addr", ""}
	t.Setenv("OUTBOX_NO_NOTIFY", "yes")
	code, stdout, stderr := runMain(t, context.Background(), args...)
	if code != exitUsage || stdout != "" || lines(stderr) > 2 || !strings.Contains(stderr, `OUTBOX_NO_NOTIFY: invalid value "yes"`) ||
		!strings.Contains(stderr, "true or false") || !strings.Contains(stderr, "1, 0, t, f") {
		t.Errorf("OUTBOX_NO_NOTIFY=yes: exit %d, stderr:\n%s\nwant exit 2 naming the variable and the accepted values", code, stderr)
	}
	t.Setenv("OUTBOX_NO_NOTIFY", "")
	t.Setenv("OUTBOX_LEASE", "30")
	code, _, stderr = runMain(t, context.Background(), args...)
	if code != exitUsage || !strings.Contains(stderr, `OUTBOX_LEASE: invalid value "30" for --lease: want a duration with a unit, e.g. 30s`) {
		t.Errorf("OUTBOX_LEASE=30: exit %d, stderr %q", code, stderr)
	}
	// A flag on the command line wins over the variable, as before.
	if code, _, stderr = runMain(t, context.Background(), append(args, "--lease", "0.5s")...); code != exitUsage || !strings.Contains(stderr, "--lease: must be at least 1s") {
		t.Errorf("--lease 0.5s with OUTBOX_LEASE=30: exit %d, stderr %q; want the flag's own error", code, stderr)
	}
}

// A misspelled OUTBOX_* variable is warned of, naming the one meant; the
// variables the project's other tools and tests read, and ones far from
// every flag's, are not.
func TestMisspelledEnvironmentVariableIsWarnedOf(t *testing.T) {
	got := misspelledEnv([]string{
		"OUTBOX_POLLINTERVAL=1s", "OUTBOX_BROKER=k:9092", "OUTBOX_LEASE_=5s", "OUTBOX_TOPIC=orders",
		"PATH=/bin", "OUTBOX_MY_APP_SETTING=x",
		// The other tools' and the tests' own.
		"OUTBOX_TEST_KAFKA=kfake", "OUTBOX_TEST_KAFKA_BROKERS=k:9092", "OUTBOX_TEST_KAFKA_VERSION=3.9.1", "OUTBOX_TEST_PG=x",
		"OUTBOX_TEST_KAFKA_BROKERS_3_9_1=k", "OUTBOX_FAULTS_REAL_SCALE=1", "OUTBOX_FAULTS_LOGDIR=d", "OUTBOX_FAULTS_CHAOS=1",
		"OUTBOX_FAULTS_DEBUG=1", "OUTBOX_MODEL_SEEDS=9", "OUTBOX_DEPLOY_CHECKS=1", "OUTBOX_KAFKA_CACHE=d", "OUTBOX_KAFKA_CPUS=1",
		"OUTBOX_KAFKA=4.4.0", "OUTBOX_BROKER_PORT=9092", "OUTBOX_RATE=2",
	})
	want := []string{
		"outbox-relay: warning: OUTBOX_BROKER is read by no flag and is ignored; did you mean OUTBOX_BROKERS?",
		"outbox-relay: warning: OUTBOX_LEASE_ is read by no flag and is ignored; did you mean OUTBOX_LEASE?",
		"outbox-relay: warning: OUTBOX_POLLINTERVAL is read by no flag and is ignored; did you mean OUTBOX_POLL_INTERVAL?",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// On the command line: the warning, then the command's own error.
	t.Setenv("OUTBOX_BROKER", "127.0.0.1:9092")
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", "postgres://u@127.0.0.1:1/db", "--topic", "t")
	if code != exitUsage || !strings.Contains(stderr, "did you mean OUTBOX_BROKERS?") || !strings.Contains(stderr, "--brokers: required") ||
		!strings.Contains(stderr, "or set OUTBOX_BROKERS") {
		t.Fatalf("run with OUTBOX_BROKER: exit %d, stderr %q", code, stderr)
	}
}

// JSON logs write durations with their unit ("lease":"30s"), as the
// flags take them; zap's default was a unitless number of seconds
// ("lease":30, "batch_timeout":0.000000001), which a new user could not
// read.
func TestJSONLogsGiveDurationsWithTheirUnit(t *testing.T) {
	var buf bytes.Buffer
	c := commonFlags{logLevel: "info", logFormat: "json"}
	log, err := c.logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("x", zap.Duration("lease", 30*time.Second), zap.Duration("retry_in", 200*time.Millisecond))
	if out := buf.String(); !strings.Contains(out, `"lease":"30s"`) || !strings.Contains(out, `"retry_in":"200ms"`) {
		t.Fatalf("JSON log line %s; want \"lease\":\"30s\" and \"retry_in\":\"200ms\"", out)
	}
}

// A bad database URL taken from the environment is named by its variable,
// not by a --database-url the user never typed.
func TestDatabaseURLErrorNamesItsVariable(t *testing.T) {
	for _, tc := range []struct{ env, value string }{
		{"DATABASE_URL", "postgres://relay:p@ss#1@127.0.0.1:1/postgres"},
		{"OUTBOX_DATABASE_URL", "postgres://relay:p@ss#1@127.0.0.1:1/postgres"},
		{"DATABASE_URL", "postgres://127.0.0.1:1/postgres?connect_timeout=x"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "")
			t.Setenv("OUTBOX_DATABASE_URL", "")
			t.Setenv(tc.env, tc.value)
			code, _, stderr := runMain(t, context.Background(), "migrate")
			if code != exitUsage || !strings.Contains(stderr, tc.env+" (--database-url): ") {
				t.Errorf("%s=%q: exit %d, stderr %q; want exit 2 naming %s", tc.env, tc.value, code, stderr, tc.env)
			}
		})
	}
}
