package testhook

// Environment a test build reads (ignored by release builds): the apply
// step at which the process kills itself, and how far ahead of the real
// clock its clock runs (a Go duration, e.g. "37s").
const (
	CrashEnv = "OPENFLARE_CRASHPOINT"
	SkewEnv  = "OPENFLARE_CLOCK_SKEW"
)
