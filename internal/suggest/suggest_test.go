package suggest

import (
	"slices"
	"testing"
)

func TestNearest(t *testing.T) {
	names := []string{"billing", "Orders", "Refunds", "lagging", "group-1", "group-2"}
	for _, c := range []struct {
		typed string
		want  []string
	}{
		{"biling", []string{"billing"}},
		{"Order", []string{"Orders"}},
		{"orders", []string{"Orders"}},
		{"Ordres", []string{"Orders"}},
		{"laging", []string{"lagging"}},
		{"group-3", []string{"group-1", "group-2"}},
		{"nosuchgroup", []string{}},
		{"billing", []string{}}, // an exact name is not a suggestion
	} {
		if got := Nearest(c.typed, names); !slices.Equal(got, c.want) {
			t.Errorf("Nearest(%q) = %v, want %v", c.typed, got, c.want)
		}
	}
}
