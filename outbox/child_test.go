package outbox_test

// runChild runs a child process role when the environment asks for one.
func runChild() (int, bool) { return 0, false }
