package lograte

import (
	"strconv"
	"testing"
	"time"
)

// TestAllow: the first record of a key is written, the next ones within the interval are
// left out and counted, and the first one after it carries the count.
func TestAllow(t *testing.T) {
	l := New(time.Minute, 10)
	t0 := time.Unix(1000, 0)
	written := 0
	for i := range 1000 {
		if ok, n := l.Allow("10.0.0.1", t0.Add(time.Duration(i)*time.Millisecond)); ok {
			written++
			if n != 0 {
				t.Fatalf("first record carries %d left out", n)
			}
		}
	}
	if written != 1 {
		t.Fatalf("%d of 1000 records within a minute written, want 1", written)
	}
	if ok, _ := l.Allow("10.0.0.2", t0.Add(time.Second)); !ok {
		t.Fatal("another key's first record was left out")
	}
	ok, n := l.Allow("10.0.0.1", t0.Add(time.Minute))
	if !ok || n != 999 {
		t.Fatalf("after the interval: written %v, carries %d left out, want true, 999", ok, n)
	}
	if ok, _ := l.Allow("10.0.0.1", t0.Add(time.Minute+time.Second)); ok {
		t.Fatal("a second record within the new interval was written")
	}
}

// TestAllowBoundedKeys: many keys keep at most maxKeys entries, and the keys beyond share
// one entry, so the records written per interval stay at most maxKeys+1.
func TestAllowBoundedKeys(t *testing.T) {
	l := New(time.Minute, 100)
	t0 := time.Unix(1000, 0)
	written := 0
	for i := range 100000 {
		if ok, _ := l.Allow("10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), t0.Add(time.Duration(i)*time.Microsecond)); ok {
			written++
		}
	}
	if written != 101 || l.Len() != 100 {
		t.Fatalf("100000 keys within a minute: %d records written, %d keys kept; want 101, 100", written, l.Len())
	}
	// An interval later the old keys are pruned and new ones get entries again.
	if ok, _ := l.Allow("192.0.2.1", t0.Add(2*time.Minute)); !ok || l.Len() != 1 {
		t.Fatalf("after the interval: written %v, %d keys kept", ok, l.Len())
	}
}
