package shard

import "testing"

// TestSlot checks slot against the values Redis gives (CLUSTER KEYSLOT
// somekey is 11058 and foo{hash_tag} 2515 in the command's documentation;
// 0x31C3 is CRC16/XMODEM's check value of "123456789").
func TestSlot(t *testing.T) {
	t.Parallel()
	for tag, want := range map[string]uint16{"somekey": 11058, "hash_tag": 2515, "123456789": 0x31C3 % slots} {
		if got := slot(tag); got != want {
			t.Errorf("slot(%q) = %d, want %d", tag, got, want)
		}
	}
}

// TestPartitionNamesSpread checks that partition k's slot lies in the k-th
// of n equal slot ranges, and that names are stable.
func TestPartitionNamesSpread(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 6, 16, 64} {
		ps := PartitionNames("orders", n)
		seen := map[string]bool{}
		for k, p := range ps {
			if got := int(slot(p)) * n / slots; got != k {
				t.Errorf("n=%d: partition %d %q has slot %d, in range %d", n, k, p, slot(p), got)
			}
			if seen[p] {
				t.Errorf("n=%d: %q twice", n, p)
			}
			seen[p] = true
		}
		again := PartitionNames("orders", n)
		for k := range ps {
			if again[k] != ps[k] {
				t.Errorf("n=%d: names change between calls: %q then %q", n, ps[k], again[k])
			}
		}
	}
}
