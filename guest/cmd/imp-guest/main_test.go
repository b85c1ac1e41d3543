package main

import "testing"

func TestParseFlagsPicksModeAndVsockDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, true)
	if err != nil || cfg.mode != "pid1" || cfg.vsockPort != 10700 || cfg.serialName != "imp.agent" {
		t.Fatalf("as PID 1: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"--listen-unix", "/tmp/s"}, false)
	if err != nil || cfg.mode != "process" || cfg.vsockPort != 0 || cfg.listenUnix != "/tmp/s" {
		t.Fatalf("as a process: %+v, %v", cfg, err)
	}
}

func TestParseFlagsReportsUnknownFlagsButKeepsDefaults(t *testing.T) {
	// The kernel may hand init stray words; PID 1 logs the error and carries on with the defaults.
	cfg, err := parseFlags([]string{"--bogus"}, true)
	if err == nil || cfg.mode != "pid1" || cfg.vsockPort != 10700 {
		t.Fatalf("%+v, %v", cfg, err)
	}
}
