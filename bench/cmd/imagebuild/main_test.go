package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// selfSignedPEM returns a self-signed CA certificate, PEM-encoded: a
// bundle of one.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "imagebuild test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// unpack writes the image's file system (its layers, flattened by
// go-containerregistry's mutate.Extract) into dir, and returns the
// entries' names and modes. Only directories and regular files are
// expected: anything else (a link, a device) fails t.
func unpack(t *testing.T, img v1.Image, dir string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read the image's layers: %v", err)
		}
		clean := filepath.Clean(h.Name)
		if !filepath.IsLocal(clean) {
			t.Fatalf("the image holds %q, outside its root", h.Name)
		}
		out[clean] = h
		p := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("the image holds %q of tar type %q; want only directories and regular files", h.Name, h.Typeflag)
		}
	}
}

// TestImageRunsVersionFromItsLayers builds the image as `make image`
// does, reads it back from the OCI layout, unpacks its layers into a
// directory and runs the binary's `version` from there (the image has no
// shell to run anything else), and checks its configuration: non-root
// user, entrypoint, default command, port, labels. The tarball holds the
// same image.
func TestImageRunsVersionFromItsLayers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	testCA := selfSignedPEM(t)
	if err := os.WriteFile(ca, testCA, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--oci", filepath.Join(dir, "oci"), "--tar", filepath.Join(dir, "image.tar"),
		"--version", "v0.1.0-test", "--revision", "0123abcd", "--module", "../../..", "--ca-bundle", ca,
		"--created", "2026-11-30T12:00:00Z"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, o, &stdout, &stderr); err != nil {
		t.Fatalf("imagebuild: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 || !strings.Contains(stdout.String(), "image outbox-relay:v0.1.0-test") {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}

	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v0.1.0-test" || im.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Fatalf("OCI layout index: %+v; want one OCI manifest named v0.1.0-test", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || strings.HasPrefix(c.User, "0") || c.User == "" || c.User == "root" {
		t.Errorf("User %q, want the non-root 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/outbox-relay"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("Entrypoint %q, Cmd %q; want [/outbox-relay] and [run]", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["9090/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("ExposedPorts %v, want 9090/tcp", c.ExposedPorts)
	}
	for k, v := range map[string]string{"org.opencontainers.image.version": "v0.1.0-test", "org.opencontainers.image.revision": "0123abcd",
		"org.opencontainers.image.licenses": "Apache-2.0", "org.opencontainers.image.created": "2026-11-30T12:00:00Z"} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if cf.OS != "linux" || cf.Created.Time.UTC() != time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) {
		t.Errorf("os %s, created %s", cf.OS, cf.Created)
	}

	root := filepath.Join(dir, "rootfs")
	files := unpack(t, img, root)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt", "home", "home/nonroot", "outbox-relay"}
	if !slices.Equal(names, want) {
		t.Errorf("the image holds %q, want %q (and no shell)", names, want)
	}
	if h := files["outbox-relay"]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Errorf("/outbox-relay: %+v, want an executable owned by root", h)
	}
	if h := files["home/nonroot"]; h == nil || h.Uid != 65532 {
		t.Errorf("/home/nonroot: %+v, want owned by 65532", h)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(b), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the user 65532:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); !bytes.Equal(b, testCA) {
		t.Errorf("the image's CA bundle is not --ca-bundle's")
	}
	out, err := exec.CommandContext(ctx, filepath.Join(root, "outbox-relay"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "outbox-relay v0.1.0-test\n") || !strings.Contains(string(out), "revision: 0123abcd") {
		t.Fatalf("/outbox-relay version from the unpacked layers: %v\n%s", err, out)
	}
	if b, err := exec.Command("go", "version", "-m", filepath.Join(root, "outbox-relay")).Output(); err != nil || !strings.Contains(string(b), "CGO_ENABLED=0") {
		t.Errorf("go version -m: %v; want a CGO_ENABLED=0 build:\n%s", err, b)
	}

	tag, _ := name.NewTag("outbox-relay:v0.1.0-test")
	timg, err := tarball.ImageFromPath(filepath.Join(dir, "image.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.ConfigName()
	d2, err := timg.ConfigName()
	if err != nil || d1 != d2 {
		t.Errorf("tarball's config %s (%v), layout's %s; want the same image", d2, err, d1)
	}
}

// Without the CA bundle the image has no certificates, and the builder
// says so; a file that is not PEM is refused.
func TestCABundleMissingOrBad(t *testing.T) {
	t.Parallel()
	if b, err := readCABundle(filepath.Join(t.TempDir(), "none.crt")); b != nil || err != nil {
		t.Errorf("missing bundle: %q, %v; want none and no error", b, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.crt")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCABundle(bad); err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Errorf("bad bundle: %v", err)
	}
	fs, err := rootfs([]byte("bin"), nil, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(fs))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if strings.HasPrefix(h.Name, "etc/ssl") {
			t.Errorf("an image without a bundle holds %s", h.Name)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--version: required"},
		{[]string{"--version", "v1", "--created", "yesterday"}, "--created"},
		{[]string{"--version", "v1", "--tag", "Bad Tag"}, "--tag"},
		{[]string{"--version", "v1", "extra"}, `unexpected argument "extra"`},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1764500000")
	o, err := parseFlags([]string{"--version", "v1.2.3+meta"}, io.Discard)
	if err != nil || o.tag != "outbox-relay:v1.2.3_meta" || !o.created.Equal(time.Unix(1764500000, 0)) {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}
