// Package faults holds the fault-injection suite (tests only): relays run
// as subprocesses (proc_*_test.go) or in-process (inproc_*_test.go) on a
// real PostgreSQL and a Kafka-protocol broker, faults are injected through
// kfake hooks, internal/faultnet, internal/tcpproxy, SIGKILL and Postgres
// restarts, and every test ends with internal/checker.
package faults
