package testhook

// Environment a test build reads (ignored by release builds): the apply
// step at which the process kills itself, how far ahead of the real clock
// its clock runs (a Go duration, e.g. "37s"), and a directive name the
// template policy's reader is to miss.
const (
	CrashEnv       = "OPENFLARE_CRASHPOINT"
	SkewEnv        = "OPENFLARE_CLOCK_SKEW"
	PolicyBlindEnv = "OPENFLARE_POLICY_BLIND"
)
