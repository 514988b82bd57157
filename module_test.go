package outbox_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
)

// apacheLicenseSHA256 are the SHA-256 sums of the Apache License 2.0 as
// https://www.apache.org/licenses/LICENSE-2.0.txt serves it, and of the
// same text without its leading blank line (the form most Go modules
// ship, e.g. prometheus/client_golang's LICENSE, from which ours is
// copied).
var apacheLicenseSHA256 = map[string]bool{
	"cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30": true,
	"c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4": true,
}

// TestLicenseIsApache2 keeps LICENSE the unmodified Apache License 2.0 and
// the README's SPDX line naming it.
func TestLicenseIsApache2(t *testing.T) {
	lic, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lic)
	if !apacheLicenseSHA256[hex.EncodeToString(sum[:])] {
		t.Errorf("LICENSE (sha256 %x) is not the Apache License 2.0 text, byte for byte", sum)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	head := readme[:min(len(readme), 400)]
	if !bytes.Contains(head, []byte("SPDX-License-Identifier: Apache-2.0")) {
		t.Errorf("README.md's first lines lack SPDX-License-Identifier: Apache-2.0:\n%s", head)
	}
}

// TestReadmeGoVersionIsGoMods keeps the Go version the README asks for
// the one go.mod's go directive requires, and the README's install lines.
func TestReadmeGoVersionIsGoMods(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Go " + string(m[1]) + " or later",
		"go get github.com/pgoutbox/outbox@latest",
		"go install github.com/pgoutbox/outbox/cmd/outbox-relay@latest",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks %q (go.mod: go %s)", want, m[1])
		}
	}
	if other := regexp.MustCompile(`Go 1\.\d+(\.\d+)? or later`).FindAllString(string(readme), -1); len(other) != 1 {
		t.Errorf("README.md names the Go version %d times (%q); want once, as go.mod does", len(other), other)
	}
}

// TestReadmeIsShort keeps the README within 400 lines (what it is, the
// quick start, writing events, running, guarantees, operating); the rest
// belongs in docs/.
func TestReadmeIsShort(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(readme, []byte("\n")); n > 400 {
		t.Errorf("README.md has %d lines, want 400 or fewer: move detail to docs/", n)
	}
}
