package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The size limits of the core packages' code: a function (or method) of
// more than maxFuncLines lines, from its func keyword to its closing brace,
// or a non-test file of more than maxFileLines lines is hard to review and
// to change in one piece; split it.
const (
	maxFuncLines = 80
	maxFileLines = 600
)

// coreDirs are the packages whose code the size limits apply to: the root
// package (the writer API), what users configure (lease, notify, kafka)
// and the engine (relay, internal/claim, internal/listen, internal/produce).
var coreDirs = []string{".", "relay", "lease", "notify", "kafka", "internal/claim", "internal/listen", "internal/produce"}

// sizeAllowed are the functions and files over the limits today, named as
// TestCoreCodeSize names them, with their size now: they may shrink but not
// grow. An entry no longer over its limit fails the test too, so the list
// only shrinks.
var sizeAllowed = map[string]int{}

// TestCoreCodeSize keeps every function of the core packages within
// maxFuncLines lines and every non-test file within maxFileLines lines,
// naming the offenders. The files are parsed, not built, so every file
// counts whatever its build constraints.
func TestCoreCodeSize(t *testing.T) {
	over := map[string]int{}
	for _, dir := range coreDirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			n++
			oversized(t, filepath.ToSlash(path), over)
		}
		if n == 0 {
			t.Errorf("%s: no non-test Go files; is coreDirs out of date?", dir)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(over)) {
		lines, allowed := over[name], sizeAllowed[name]
		switch {
		case allowed == 0:
			t.Errorf("%s: %d lines (limits: functions %d lines, files %d lines); split it",
				name, lines, maxFuncLines, maxFileLines)
		case lines > allowed:
			t.Errorf("%s: %d lines, grown past the %d that sizeAllowed lets it keep; split it",
				name, lines, allowed)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sizeAllowed)) {
		if _, ok := over[name]; !ok {
			t.Errorf("sizeAllowed lists %s, which is no longer over its limit (or no longer exists): remove the entry", name)
		}
	}
}

// oversized adds to over what in the Go file at path is over the limits,
// with its length in lines: the file as "path", a function as
// "path: func name".
func oversized(t *testing.T, path string, over map[string]int) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		over[path] = n
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
		if n > maxFuncLines {
			over[path+": func "+funcName(fd)] = n
		}
	}
}

// funcName is fd's name as a reader looks it up: "Name" for a function,
// "(*T).Name" or "(T).Name" for a method (type parameters left out).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	name := "?"
	if id, ok := typ.(*ast.Ident); ok {
		name = id.Name
	}
	return "(" + star + name + ")." + fd.Name.Name
}
