package message

import (
	"strings"
	"testing"
)

// TestValidateNameShowsTheCharacter: a refused multi-byte character was shown as its
// first byte read as Latin-1 ("character 'æ'" for "日本"); the refusal now shows the
// character itself, or the byte in hex when the name is not UTF-8.
func TestValidateNameShowsTheCharacter(t *testing.T) {
	for name, want := range map[string]string{"日本": `'日' at position 0`, "ab\xffc": `'\xff' at position 2`, "a b": `' ' at position 1`} {
		err := ValidateTopic(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTopic(%q) = %v, want it to contain %s", name, err, want)
		}
	}
}
