package outbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxUserModules bounds `go list -m all` in a module that imports only the
// writer (outbox.Add): this module's requirements, the product's and its
// tests', are all a user's build sees. The tooling (bench/, its own
// module) brings gonum, go-containerregistry, prometheus/prometheus and
// testcontainers-go's Docker client; none of them may come back here. The
// Schema Registry formats took it from 79 to 89: franz-go's sr,
// hamba/avro (with json-iterator, reflect2, concurrent, mapstructure,
// strcase, snappy), santhosh-tekuri/jsonschema (regexp2),
// bufbuild/protocompile, and linkedin/goavro, the tests' independent
// Avro decoder.
const maxUserModules = 90

// TestWriterUserModuleGraphIsSmall builds the module graph of a user who
// imports only the writer and checks its size and that the tooling's
// modules are not in it.
func TestWriterUserModuleGraphIsSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/user\n\ngo 1.26.0\n\nrequire github.com/pgoutbox/outbox v0.0.0\n\nreplace github.com/pgoutbox/outbox => "+root+"\n")
	write("main.go", `package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "")
	if err != nil {
		panic(err)
	}
	_ = outbox.Add(context.Background(), pool, outbox.Event{Topic: "orders", AggregateID: "1", Type: "created", Payload: []byte("{}")})
}
`)
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gocmd("mod", "tidy")
	gocmd("build", "-o", os.DevNull, ".")
	mods := strings.Fields(gocmd("list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("a writer-only user module has %d modules in go list -m all", len(mods))
	if len(mods) > maxUserModules {
		t.Errorf("a writer-only user module has %d modules in go list -m all, want at most %d:\n%s", len(mods), maxUserModules, strings.Join(mods, "\n"))
	}
	for _, m := range mods {
		for _, banned := range []string{"gonum.org/", "github.com/google/go-containerregistry", "github.com/prometheus/prometheus", "github.com/testcontainers/", "github.com/moby/"} {
			if strings.HasPrefix(m, banned) {
				t.Errorf("%s is in a writer-only user's module graph: tooling belongs in bench/go.mod", m)
			}
		}
	}
}
