package message

import (
	"slices"
	"testing"
)

func TestDefaultDelayLevelsIsTheParsedTable(t *testing.T) {
	parsed, err := ParseDelayLevels(DefaultMessageDelayLevel)
	if err != nil {
		t.Fatal(err)
	}
	got := DefaultDelayLevels()
	if !slices.Equal(got, parsed) || len(got) != 18 {
		t.Fatalf("DefaultDelayLevels() = %v, the parsed DefaultMessageDelayLevel = %v (want 18 equal levels)", got, parsed)
	}
	got[0] = 0
	if DefaultDelayLevels()[0] == 0 {
		t.Fatal("changing a returned table changed the next call's")
	}
}

func TestParseDelayLevelsRejects(t *testing.T) {
	for _, s := range []string{"", "1s 0s", "5", "1x", "-1m"} {
		if _, err := ParseDelayLevels(s); err == nil {
			t.Errorf("ParseDelayLevels(%q) = nil error", s)
		}
	}
}
