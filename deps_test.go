package conveyor_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMinimalProgramDeps: a program that uses the root package, worker and
// broker/list builds no SQL driver, no OpenTelemetry SDK, no protobuf and no
// gRPC, so none of them lands in its go.sum. Those belong to the examples
// and contrib packages that need them.
func TestMinimalProgramDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".", "./worker", "./broker/list").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"database/sql",
		"go.opentelemetry.io/otel/sdk",
		"google.golang.org/protobuf",
		"google.golang.org/grpc",
		"github.com/lib/pq",
		"github.com/jackc/",
		"github.com/go-sql-driver/",
		"github.com/mattn/go-sqlite3",
		"modernc.org/",
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list -deps listed %d packages, want the program's whole build:\n%s", len(pkgs), out)
	}
	for _, p := range pkgs {
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(p, f+"/")) {
				t.Errorf("a minimal program builds %s", p)
			}
		}
	}
}
