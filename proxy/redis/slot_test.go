package redis

import "testing"

func TestSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"123456789", 0x31c3 % numSlots}, // CRC-16/XMODEM check value
		{"{foo}.anything", 12182},
		{"x{foo}y{bar}", 12182},  // the first tag counts
		{"{}foo", Slot("{}foo")}, // empty tag: whole key (checked below)
		{"", 0},
	}
	for _, tt := range tests {
		if got := Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q): got %d, want %d", tt.key, got, tt.want)
		}
	}
	if got, want := crc16("{}foo"), crc16("{}foo"); Slot("{}foo") != int(want%numSlots) || got != want {
		t.Errorf("Slot({}foo): got %d, want the whole key hashed", Slot("{}foo"))
	}
	if Slot("{user1000}.following") != Slot("{user1000}.followers") {
		t.Errorf("{user1000}.following and .followers: got slots %d and %d, want the same",
			Slot("{user1000}.following"), Slot("{user1000}.followers"))
	}
	if Slot("foo{{bar}}") != Slot("{bar") {
		t.Errorf("foo{{bar}}: got slot %d, want that of \"{bar\" (%d)", Slot("foo{{bar}}"), Slot("{bar"))
	}
	if Slot(TokenKey("jobs")) != Slot("{jobs}:last") {
		t.Errorf("token key and {jobs}:last: got slots %d and %d, want the same", Slot(TokenKey("jobs")), Slot("{jobs}:last"))
	}
}
