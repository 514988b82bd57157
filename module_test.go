package outbox_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	pathpkg "path"
	"regexp"
	"strconv"
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

// readmeFreeNames are the variables the README's Go snippets use without
// declaring them (the reader's own): a selector on one of them is not a
// package reference.
var readmeFreeNames = map[string]bool{"pool": true, "payment": true}

// TestReadmeGoShowsItsImports: every Go snippet in the README shows an
// import block, and every package it names (pkg.Name, pkg not declared in
// the snippet) is imported there. A newcomer met two packages called
// kafka (ours and kafka-go's) in snippets without imports.
func TestReadmeGoShowsItsImports(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 3 {
		t.Fatalf("%d Go snippets in the README, want the writer's, the relay's and the inbox's", len(blocks))
	}
	for _, b := range blocks {
		code := b[1]
		if !strings.HasPrefix(code, "import ") {
			t.Errorf("a Go snippet does not begin with its imports:\n%s", code)
			continue
		}
		// The imports, then declarations or (wrapped in a function)
		// statements.
		f, err := parser.ParseFile(token.NewFileSet(), "README.md", "package p\n"+code, 0)
		if err != nil {
			decls := regexp.MustCompile(`(?s)^import (?:\(.*?\n\)|"[^"]*")\n`).FindString(code)
			f, err = parser.ParseFile(token.NewFileSet(), "README.md", "package p\n"+decls+"func _() {\n"+code[len(decls):]+"\n}", 0)
		}
		if err != nil {
			t.Errorf("a Go snippet does not parse: %v\n%s", err, code)
			continue
		}
		imported := map[string]bool{}
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			name := pathpkg.Base(path)
			if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) {
				name = pathpkg.Base(pathpkg.Dir(path))
			}
			if is.Name != nil {
				name = is.Name.Name
			} else if strings.ContainsAny(name, "-.") {
				t.Errorf("import %s: its package name is not its last element; give it a name (e.g. kafkago)", path)
			}
			imported[name] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Obj == nil && !readmeFreeNames[x.Name] && !imported[x.Name] {
					t.Errorf("a Go snippet uses %s.%s without importing %s:\n%s", x.Name, sel.Sel.Name, x.Name, code)
				}
			}
			return true
		})
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
