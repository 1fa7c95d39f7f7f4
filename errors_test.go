package conveyor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryExportedErrorIsReturned: every exported error variable of the
// module (a package-level var named Err...) is one that some code of the
// module returns or wraps, so a caller never tests for an error no call
// gives. A reference counts unless it only compares: the second argument
// of errors.Is, or a side of == or != outside an Is method. A variable set to another package's
// error (conveyor.ErrLeaseLost = broker.ErrLeaseLost) counts when that one
// does.
func TestEveryExportedErrorIsReturned(t *testing.T) {
	t.Parallel()
	const module = "github.com/conveyorq/conveyor"
	type errVar struct {
		pkg, name string
		alias     string // "pkg.Name" of the error it is set to, if any
	}
	var (
		decls []errVar
		used  = map[string]bool{} // "pkg.Name" returned or wrapped somewhere
		fset  = token.NewFileSet()
	)
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		pkg := path.Join(module, filepath.ToSlash(filepath.Dir(p)))
		pkg = strings.TrimSuffix(pkg, "/.")
		imports := map[string]string{} // local name -> import path
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			name := path.Base(ip)
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = ip
		}
		qualify := func(e ast.Expr) string {
			switch x := e.(type) {
			case *ast.Ident:
				return pkg + "." + x.Name
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && imports[id.Name] != "" {
					return imports[id.Name] + "." + x.Sel.Name
				}
			}
			return ""
		}
		declared := map[*ast.Ident]bool{}
		// Comparisons are not returns, nor is the value an error variable
		// is set to: neither counts as a use.
		skip := map[ast.Expr]bool{}
		for _, dl := range f.Decls {
			g, ok := dl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					declared[n] = true
					if !n.IsExported() || !strings.HasPrefix(n.Name, "Err") || strings.Contains(pkg, "/internal/") {
						continue
					}
					v := errVar{pkg: pkg, name: n.Name}
					if i < len(vs.Values) {
						if q := qualify(vs.Values[i]); strings.Contains(q, ".Err") {
							v.alias = q
							skip[vs.Values[i]] = true
						}
					}
					decls = append(decls, v)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.FuncDecl:
				// An Is method's comparison is how its type matches the
				// error (errors.Is): a use.
				return x.Recv == nil || x.Name.Name != "Is"
			case *ast.BinaryExpr:
				if x.Op == token.EQL || x.Op == token.NEQ {
					skip[x.X], skip[x.Y] = true, true
				}
			case *ast.CallExpr:
				if qualify(x.Fun) == "errors.Is" && len(x.Args) == 2 {
					skip[x.Args[1]] = true
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			if skip[e] {
				return false
			}
			switch x := e.(type) {
			case *ast.SelectorExpr:
				if q := qualify(x); q != "" {
					used[q] = true
				}
				return false
			case *ast.Ident:
				if !declared[x] && strings.HasPrefix(x.Name, "Err") {
					used[pkg+"."+x.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(decls) < 5 {
		t.Fatalf("found %d exported error variables, want the module's (at least conveyor's and broker's)", len(decls))
	}
	var isUsed func(q string, depth int) bool
	byName := map[string]errVar{}
	for _, v := range decls {
		byName[v.pkg+"."+v.name] = v
	}
	isUsed = func(q string, depth int) bool {
		if used[q] {
			return true
		}
		if v, ok := byName[q]; ok && v.alias != "" && depth < 4 {
			return isUsed(v.alias, depth+1)
		}
		return false
	}
	for _, v := range decls {
		if q := v.pkg + "." + v.name; !isUsed(q, 0) {
			t.Errorf("%s is exported but no code of the module returns or wraps it", q)
		}
	}
}
