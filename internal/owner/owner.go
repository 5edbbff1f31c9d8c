package owner

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Owner identifies a process on a machine.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start,omitempty"` // clock ticks after boot
	Boot  string `json:"boot,omitempty"`  // /proc/sys/kernel/random/boot_id
	PidNS string `json:"pidns,omitempty"` // readlink /proc/self/ns/pid
	Host  string `json:"host,omitempty"`
}

var self = sync.OnceValue(func() Owner {
	o := Owner{PID: os.Getpid(), Start: ProcessStart(os.Getpid())}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		o.Boot = strings.TrimSpace(string(b))
	}
	o.PidNS, _ = os.Readlink("/proc/self/ns/pid")
	o.Host, _ = os.Hostname()
	return o
})

// Self is the current process as an owner.
func Self() Owner { return self() }

// Liveness of an owner as seen from this process.
type Liveness string

const (
	Alive   Liveness = "alive"
	Dead    Liveness = "dead"
	Unknown Liveness = "unknown" // another machine or pid namespace
)

// Liveness tells whether o still runs. An owner in another pid namespace
// or on another machine is Unknown, except that an owner on this host
// name whose boot id differs is Dead (the machine rebooted since).
func (o Owner) Liveness() Liveness {
	me := self()
	if o.PID <= 0 {
		return Unknown
	}
	if o.Boot != "" && me.Boot != "" && o.Boot != me.Boot {
		if o.Host != "" && o.Host == me.Host {
			return Dead
		}
		return Unknown
	}
	if o.Boot == "" || o.PidNS == "" || o.PidNS != me.PidNS {
		return Unknown
	}
	if err := syscall.Kill(o.PID, 0); err != nil && errors.Is(err, syscall.ESRCH) {
		return Dead
	}
	if s := ProcessStart(o.PID); o.Start != 0 && s != 0 && s != o.Start {
		return Dead // the pid was reused
	}
	if zombie(o.PID) {
		return Dead
	}
	return Alive
}

// ProcessStart returns a process's start time in clock ticks after boot
// (field 22 of /proc/PID/stat), or 0 when unknown.
func ProcessStart(pid int) uint64 {
	f := statFields(pid)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

func zombie(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// statFields returns the fields of /proc/PID/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// String describes the owner for people: "pid 12", or "pid 12 on box"
// when its host name is known; "" for an owner never recorded (pid 0).
func (o Owner) String() string {
	if o.PID == 0 {
		return ""
	}
	s := "pid " + strconv.Itoa(o.PID)
	if o.Host != "" {
		s += " on " + o.Host
	}
	return s
}
