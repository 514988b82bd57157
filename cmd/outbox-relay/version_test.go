package main

import (
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// A binary built with -X main.version reports that version, and the
// module version from its build information beside the module path.
func TestVersionReportsTheStampedVersion(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-X main.version=v9.8.7-stamp", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	code, out, stderr := runBinary(t, bin, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "outbox-relay v9.8.7-stamp\n") || !strings.Contains(out, "module:   github.com/pgoutbox/outbox (devel)\n") {
		t.Fatalf("version: exit %d, stderr %q, stdout:\n%s\nwant 'outbox-relay v9.8.7-stamp' and the module (devel)", code, stderr, out)
	}
}

// sourceFile is a file of the working tree, for golang.org/x/mod/zip.
type sourceFile struct{ root, rel string }

func (f sourceFile) Path() string                 { return f.rel }
func (f sourceFile) Lstat() (os.FileInfo, error)  { return os.Lstat(filepath.Join(f.root, f.rel)) }
func (f sourceFile) Open() (io.ReadCloser, error) { return os.Open(filepath.Join(f.root, f.rel)) }

// moduleFiles lists the module's source files under root, leaving out
// what .gitignore leaves out of a commit (built binaries in bin/, tmp/
// and the root, test binaries and profiles) and .git.
func moduleFiles(t *testing.T, root string) []modzip.File {
	t.Helper()
	var files []modzip.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && (rel == ".git" || rel == "bin" || rel == "tmp"):
			return filepath.SkipDir
		case d.IsDir(), strings.HasSuffix(rel, ".test"), strings.HasSuffix(rel, ".out"), d.Type()&fs.ModeSymlink != 0,
			rel == "outbox-relay", rel == "outbox-bench", rel == "outbox-dev", rel == "outbox-soak":
			return nil
		}
		files = append(files, sourceFile{root: root, rel: rel})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestVersionOfGoInstallAtVersion installs the command as a user does,
// `go install github.com/pgoutbox/outbox/cmd/outbox-relay@v0.1.0`, from
// a module proxy of this test's own (a directory holding this working
// tree's sources as the module's v0.1.0 zip, made by golang.org/x/mod/zip), and
// checks that `version` names v0.1.0. Every dependency comes from the
// local module cache's download directory, used as a second proxy, into a
// module cache of the test's own: nothing is fetched from the network and
// the user's module cache never holds the made-up v0.1.0.
func TestVersionOfGoInstallAtVersion(t *testing.T) {
	t.Parallel()
	const modPath, ver = "github.com/pgoutbox/outbox", "v0.1.0"
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	cacheProxy := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "proxy", modPath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(dir, ver+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	mv := module.Version{Path: modPath, Version: ver}
	err = modzip.Create(zf, mv, moduleFiles(t, root))
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("module zip of %s: %v", root, err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list":        []byte(ver + "\n"),
		ver + ".info": []byte(`{"Version":"` + ver + `","Time":"2026-11-30T00:00:00Z"}`),
		ver + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gobin := filepath.Join(tmp, "bin")
	// A guard against a hung build only: on a fresh machine the install
	// compiles every dependency, beside the rest of make test (load
	// average 10-15 on 2 cores), and took more than 5 minutes once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", modPath+"/cmd/outbox-relay@"+ver)
	cmd.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(filepath.Join(tmp, "proxy"))+",file://"+filepath.ToSlash(cacheProxy),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		// -modcacherw: so that t.TempDir can remove the module cache.
		// -trimpath and CGO off, as the image builder builds
		// (bench/cmd/imagebuild): the dependencies' compiled packages
		// are shared through the build cache.
		"GOFLAGS=-modcacherw -trimpath",
		"CGO_ENABLED=0",
		"GOSUMDB=off", // the made-up v0.1.0 is in no checksum database; the dependencies are checked against its go.sum
		"GOTOOLCHAIN=local",
		"GOBIN="+gobin,
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/outbox-relay@%s: %v\n%s", modPath, ver, err, out)
	}
	code, stdout, stderr := runBinary(t, filepath.Join(gobin, "outbox-relay"), nil, "version")
	if code != 0 || !strings.HasPrefix(stdout, "outbox-relay "+ver+"\n") || !strings.Contains(stdout, "module:   "+modPath+" "+ver+"\n") {
		t.Fatalf("version of the installed binary: exit %d, stderr %q, stdout:\n%s\nwant outbox-relay %s", code, stderr, stdout, ver)
	}
}
