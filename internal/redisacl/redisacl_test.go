package redisacl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/redisacl"
)

// TestLeastPrivilegeIsDocumented: the user docs/redis-keys.md gives
// operators is LeastPrivilege, the user the tests and the chaos suite
// check.
func TestLeastPrivilegeIsDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "redis-keys.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "\nACL SETUSER app reset on >SECRET " + strings.Join(redisacl.LeastPrivilege("conveyor"), " ") + "\n"
	if !strings.Contains(string(page), want) {
		t.Fatalf("docs/redis-keys.md, section ACL, does not give the user of redisacl.LeastPrivilege:%s", want)
	}
}
