package main

import (
	"net/netip"
	"testing"
)

// inLockDir points the blocks' lock files at a directory of the test's.
func inLockDir(t *testing.T) {
	saved := podBlockLocks
	podBlockLocks = t.TempDir()
	t.Cleanup(func() { podBlockLocks = saved })
}

func TestHarnessesRunningAtOnceTakeDistinctPodAddressBlocks(t *testing.T) {
	inLockDir(t)
	first, lock1, err := claimPodBlock()
	if err != nil {
		t.Fatal(err)
	}
	second, lock2, err := claimPodBlock()
	if err != nil {
		t.Fatal(err)
	}
	defer lock2.Close()
	if first != netip.MustParsePrefix("10.245.0.0/20") || second != netip.MustParsePrefix("10.245.16.0/20") {
		t.Fatalf("got blocks %v and %v, want 10.245.0.0/20 and 10.245.16.0/20", first, second)
	}
	// A harness that stops (or dies) frees its block for the next one.
	_ = lock1.Close()
	again, lock3, err := claimPodBlock()
	if err != nil {
		t.Fatal(err)
	}
	defer lock3.Close()
	if again != first {
		t.Fatalf("got %v after the first harness stopped, want its block %v back", again, first)
	}
}

func TestAHarnessFindsNoBlockWhenAllAreHeld(t *testing.T) {
	inLockDir(t)
	for i := 0; i < 16; i++ {
		_, lock, err := claimPodBlock()
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		defer lock.Close()
	}
	if _, _, err := claimPodBlock(); err == nil {
		t.Fatal("a 17th harness got a block")
	}
}
