// Package wsclient runs one WebSocket connection to the control plane
// (PROTOCOL 3): it sends status messages, answers pings and hands server
// pushes to a Handler. Reconnecting is the caller's job.
package wsclient
