// Command imagebuild builds the outbox-relay container image without a
// Docker daemon and without pulling a base image: `make image`.
//
//	go -C bench run ./cmd/imagebuild --module .. --oci bin/image --tar bin/outbox-relay-image.tar --version v0.1.0 --revision $(git rev-parse HEAD)
//
// It builds cmd/outbox-relay as a static binary (CGO_ENABLED=0, -trimpath,
// the version and revision stamped with -X), and assembles with
// github.com/google/go-containerregistry an image FROM scratch of one
// layer:
//
//	/outbox-relay                       the binary (0755)
//	/etc/passwd, /etc/group             root and nonroot (65532), no shell
//	/home/nonroot                       the user's home (0700, 65532)
//	/etc/ssl/certs/ca-certificates.crt  the build machine's CA bundle (see --ca-bundle)
//
// Its configuration runs as 65532:65532, has the entrypoint /outbox-relay,
// the default command run, exposes 9090 (/metrics, /healthz, /readyz), and
// carries the OCI labels org.opencontainers.image.{title,description,
// version,revision,licenses,source,created}. There is no shell: the image
// runs nothing but outbox-relay.
//
// It writes an OCI image layout directory (--oci; load it with `skopeo
// copy oci:DIR:VERSION docker-daemon:outbox-relay:VERSION`, or push it
// with `crane push DIR REF`) and, with --tar, a tarball that `docker load`
// and `podman load` read. The image is reproducible: every timestamp is
// --created (default: $SOURCE_DATE_EPOCH, else the Unix epoch).
//
// CA certificates: the Debian ca-certificates bundle is copied when the
// build machine has it (--ca-bundle, default
// /etc/ssl/certs/ca-certificates.crt); without it the image has none, and
// the builder says so: TLS to Kafka then needs --kafka-tls-ca, and
// PostgreSQL's sslmode=verify-full a sslrootcert.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image facts other code and tests rely on.
const (
	// Entrypoint is the binary's path in the image.
	Entrypoint = "/outbox-relay"
	// User is the non-root user and group the image runs as (distroless's
	// nonroot).
	User = "65532:65532"
	// MetricsPort is the exposed port, outbox-relay run's default
	// --metrics-addr.
	MetricsPort = "9090/tcp"
	// DefaultCABundle is where Debian's ca-certificates package puts its
	// bundle.
	DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
	// Source is the repository named in org.opencontainers.image.source.
	Source = "https://github.com/pgoutbox/outbox"
)

// options are imagebuild's flags.
type options struct {
	oci, tar, version, revision, caBundle, arch, tag, module string
	created                                                  time.Time
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.oci, "oci", "bin/image", "OCI image layout directory to write (replaced if it is one already)")
	fs.StringVar(&o.tar, "tar", "", "also write a docker/podman-loadable tarball here (default: none)")
	fs.StringVar(&o.version, "version", "", "version stamped into the binary (-X main.version) and the labels, e.g. v0.1.0 (required)")
	fs.StringVar(&o.revision, "revision", "", "VCS revision stamped into the binary (-X main.vcsRevision) and the labels (default: none)")
	fs.StringVar(&o.caBundle, "ca-bundle", DefaultCABundle, "PEM CA bundle to copy into the image; a missing file means an image without CA certificates (said on stderr)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the image (linux only)")
	fs.StringVar(&o.tag, "tag", "", "image reference of the tarball and ref.name of the layout (default: outbox-relay:<version>)")
	fs.StringVar(&o.module, "module", ".", "directory of the module to build ./cmd/outbox-relay from")
	created := fs.String("created", "", "RFC 3339 time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else 1970-01-01T00:00:00Z)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.version == "" {
		return nil, errors.New("--version: required, e.g. --version v0.1.0 (make image passes git describe)")
	}
	if o.oci == "" {
		return nil, errors.New("--oci: required")
	}
	if o.tag == "" {
		o.tag = "outbox-relay:" + strings.NewReplacer("+", "_", "/", "_").Replace(o.version)
	}
	if _, err := name.NewTag(o.tag); err != nil {
		return nil, fmt.Errorf("--tag %q: %w", o.tag, err)
	}
	switch {
	case *created != "":
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return nil, fmt.Errorf("--created: %w", err)
		}
		o.created = t.UTC()
	case os.Getenv("SOURCE_DATE_EPOCH") != "":
		sec, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		o.created = time.Unix(sec, 0).UTC()
	default:
		o.created = time.Unix(0, 0).UTC()
	}
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err == nil {
		err = run(ctx, o, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild: %v\n", err)
		os.Exit(1)
	}
}

// run builds the binary and the image and writes them where o says;
// stdout gets the summary, stderr what the image lacks.
func run(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	work, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "outbox-relay")
	if err := buildBinary(ctx, o, bin); err != nil {
		return err
	}
	ca, err := readCABundle(o.caBundle)
	if err != nil {
		return err
	}
	if ca == nil {
		fmt.Fprintf(stderr, "imagebuild: no CA certificates in the image (%s not found; Debian: apt-get install ca-certificates): TLS to Kafka needs --kafka-tls-ca, PostgreSQL's sslmode=verify-full a sslrootcert\n", o.caBundle)
	}
	img, err := buildImage(o, bin, ca)
	if err != nil {
		return err
	}
	if err := writeLayout(o.oci, img, o.tag); err != nil {
		return err
	}
	if o.tar != "" {
		ref, _ := name.NewTag(o.tag)
		if err := tarball.WriteToFile(o.tar, ref, img); err != nil {
			return fmt.Errorf("write %s: %w", o.tar, err)
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image %s (linux/%s) %s\n  OCI layout: %s (skopeo copy oci:%s:%s docker-daemon:%s)\n", o.tag, o.arch, digest, o.oci, o.oci, refName(o.tag), o.tag)
	if o.tar != "" {
		fmt.Fprintf(stdout, "  tarball:    %s (docker load -i %s)\n", o.tar, o.tar)
	}
	return nil
}

// refName is the tag part of ref ("outbox-relay:v0.1.0" -> "v0.1.0"), the
// layout's org.opencontainers.image.ref.name.
func refName(ref string) string {
	t, err := name.NewTag(ref)
	if err != nil {
		return ref
	}
	return t.TagStr()
}

// buildBinary builds ./cmd/outbox-relay of o.module into out, static and
// stamped.
func buildBinary(ctx context.Context, o *options, out string) error {
	ldflags := "-s -w -X main.version=" + o.version
	if o.revision != "" {
		ldflags += " -X main.vcsRevision=" + o.revision
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/outbox-relay")
	cmd.Dir = o.module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/outbox-relay: %w\n%s", err, b)
	}
	return nil
}

// readCABundle returns the PEM bundle at path, nil if there is no such
// file, or an error if it holds no certificate.
func readCABundle(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--ca-bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--ca-bundle %s: no PEM certificates", path)
	}
	return b, nil
}

// passwd and group name root and the non-root user, with no login shell
// (the image has none).
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// rootfs returns the layer's tar stream: the binary, /etc/passwd,
// /etc/group, the user's home and, if given, the CA bundle; every entry
// owned by root (the home by 65532), timestamped created.
func rootfs(binary, ca []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = created, tar.FormatPAX
		h.Size = int64(len(body))
		if h.Typeflag == tar.TypeDir {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		_, err := w.Write(body)
		return err
	}
	dir := func(name string, mode int64, uid int) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: uid}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, body)
	}
	steps := []func() error{
		func() error { return dir("etc/", 0o755, 0) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("home/", 0o755, 0) },
		func() error { return dir("home/nonroot/", 0o700, 65532) },
		func() error { return file("outbox-relay", 0o755, binary) },
	}
	if ca != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl/", 0o755, 0) },
			func() error { return dir("etc/ssl/certs/", 0o755, 0) },
			func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, ca) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// buildImage assembles the image: one layer on empty.Image, OCI media
// types, the configuration and labels.
func buildImage(o *options, binPath string, ca []byte) (v1.Image, error) {
	binary, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	fs, err := rootfs(binary, ca, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(fs)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "bench/cmd/imagebuild: outbox-relay " + o.version + " FROM scratch", Comment: "static outbox-relay, /etc/passwd and /etc/group, CA certificates"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: o.created}
	labels := map[string]string{
		"org.opencontainers.image.title":       "outbox-relay",
		"org.opencontainers.image.description": "pgoutbox: the Transactional Outbox relay, PostgreSQL to Kafka",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   []string{Entrypoint},
		Cmd:          []string{"run"},
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
		WorkingDir:   "/",
		Env:          []string{"PATH=/"},
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// writeLayout writes img as the only image of the OCI layout at dir,
// named ref's tag. An existing layout there is replaced; anything else
// that is not empty is refused.
func writeLayout(dir string, img v1.Image, ref string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("--oci %s: not empty and not an OCI layout; refusing to replace it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName(ref)})); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return nil
}
