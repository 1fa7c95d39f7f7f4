package drivertest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// MethodsDocumented fails t unless every exported method of v's type (a
// pointer to a named struct of the package in the current directory),
// promoted ones included, is declared in the package's own source with a
// doc comment: go doc shows only those, so a method promoted from an
// embedded internal type would be callable and undocumented where a user
// looks.
func MethodsDocumented(t *testing.T, v any) {
	t.Helper()
	typ := reflect.TypeOf(v)
	name := typ.Elem().Name()
	documented := map[string]bool{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			if id, ok := star.X.(*ast.Ident); ok && id.Name == name && fn.Doc != nil {
				documented[fn.Name.Name] = true
			}
		}
	}
	for i := range typ.NumMethod() {
		if m := typ.Method(i).Name; !documented[m] {
			t.Errorf("(*%s).%s is not declared with a doc comment in this package: go doc does not show it", name, m)
		}
	}
}
