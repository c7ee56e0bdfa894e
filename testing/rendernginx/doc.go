// Package rendernginx holds tests that load what agent/render produces into
// a real nginx: every captured fixture, a golden matrix of typical sources
// and generated sources mixing valid and invalid values must either fail to
// render with a message or, adapted and staged as the agent does, pass
// `nginx -t`. The tests run inside the namespaces of package nstest.
package rendernginx
