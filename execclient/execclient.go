// Package execclient is the fast path of `hutch exec`: a C constructor
// (client.c) that runs before the Go runtime starts, sends the command to
// the session over its control socket with the caller's stdio, and exits
// with the command's status. Importing the package (cmd/hutch does, for
// its side effect) is all it takes; the plain form `hutch exec NAME [--]
// COMMAND...` takes the fast path, everything else and every error
// message stay with the Go implementation in cmd/hutch.
package execclient

// #cgo CFLAGS: -O2 -Wall
import "C"
