package outbox

// ClaimQuery returns the statement a claim walks the pending rows with (the candidates),
// rebound for d: its arguments are now, now, now, now, limit.
func ClaimQuery(d Dialect, table string) string { return newQueries(d, table).candidates }
