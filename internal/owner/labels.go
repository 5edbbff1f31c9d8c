package owner

import "strconv"

// The keys of an Owner's fields among string labels (a container's and
// its volumes' labels), after the prefix of whoever labels: Labels and
// FromLabels encode and decode an owner with them, so that a sweep can
// tell whether what it finds was orphaned.
const (
	KeyPID   = "owner.pid"
	KeyStart = "owner.start" // clock ticks after boot, as in /proc/PID/stat
	KeyBoot  = "owner.boot"  // the kernel's boot id
	KeyPidNS = "owner.pidns" // the pid namespace
	KeyHost  = "owner.host"
)

// Labels is o as string labels, each key prefix followed by a Key*.
func (o Owner) Labels(prefix string) map[string]string {
	return map[string]string{
		prefix + KeyPID:   strconv.Itoa(o.PID),
		prefix + KeyStart: strconv.FormatUint(o.Start, 10),
		prefix + KeyBoot:  o.Boot,
		prefix + KeyPidNS: o.PidNS,
		prefix + KeyHost:  o.Host,
	}
}

// FromLabels is the owner that Labels(prefix) wrote into labels; a field
// missing or malformed is zero (an owner whose liveness is Unknown).
func FromLabels(prefix string, labels map[string]string) Owner {
	o := Owner{Boot: labels[prefix+KeyBoot], PidNS: labels[prefix+KeyPidNS], Host: labels[prefix+KeyHost]}
	o.PID, _ = strconv.Atoi(labels[prefix+KeyPID])
	o.Start, _ = strconv.ParseUint(labels[prefix+KeyStart], 10, 64)
	return o
}
