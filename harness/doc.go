// Package harness describes agent CLIs to outpost.
//
// A Harness is a preset: a value that tells the turn engine how to build
// one turn's command line for a CLI (Request), how to decode each line of
// its native output into normalized Events (Events), how to recognize quota
// and outage failures in its text (Quota, Unavailable), where it keeps its
// conversation files (Storage), which credentials and configuration it
// needs (Credentials, Configuration), and how to talk to it while it runs
// (LiveInput). Only Name, Request and Events are required.
//
// This package imports nothing of outpost but the root error package, so
// presets (harness/echo, harness/claude, ...) stay leaves. The preset
// conformance suite is harness/harnesstest.
package harness
