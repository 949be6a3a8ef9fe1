// Package monitoring holds the Grafana dashboard and Prometheus alert rules
// for raftlock, and a test that checks every metric they name against the
// /metrics of a real node.
package monitoring
