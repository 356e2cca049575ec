// Package report is what the Go client programs share: a JSON summary written to stdout
// (the facts a pytest compares between kgc and Apache Kafka), a fatal exit naming the step
// that failed, and polling with a deadline instead of sleeping.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"
)

// Summary collects the scenario's observable outcome, one key per fact.
type Summary map[string]any

// Print writes the summary as one JSON object on stdout.
func (s Summary) Print() {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		Fatalf("encode summary: %v", err)
	}
}

// Fatalf reports the failed step on stderr and exits 1.
func Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

// Step logs progress on stderr (pytest shows it when the test fails).
func Step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}

// WaitFor polls cond every 50 ms until it returns true or the deadline passes; then it
// fails, naming what was awaited and the last state cond described.
func WaitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			Step("%s: %s", what, state)
			return
		}
		last = state
		if time.Now().After(deadline) {
			Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SortedSizes returns the sizes of the partition lists, sorted ascending.
func SortedSizes(lists [][]int32) []int {
	sizes := make([]int, 0, len(lists))
	for _, l := range lists {
		sizes = append(sizes, len(l))
	}
	sort.Ints(sizes)
	return sizes
}

// Union returns the sorted union of partition lists and whether they were disjoint.
func Union(lists [][]int32) ([]int32, bool) {
	seen := map[int32]bool{}
	disjoint := true
	for _, l := range lists {
		for _, p := range l {
			if seen[p] {
				disjoint = false
			}
			seen[p] = true
		}
	}
	out := make([]int32, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, disjoint
}
