package tarsafe

import (
	"os"
	"path"
	"syscall"
	"time"
	"unsafe"
)

// atSymlinkNofollow is AT_SYMLINK_NOFOLLOW.
const atSymlinkNofollow = 0x100

// linkTimes sets the modification (and access) time of the symbolic link
// name itself, inside root: utimensat on its parent directory, opened
// through root, with AT_SYMLINK_NOFOLLOW.
func linkTimes(root *os.Root, name string, t time.Time) error {
	dir, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer dir.Close()
	p, err := syscall.BytePtrFromString(path.Base(name))
	if err != nil {
		return err
	}
	ts := [2]syscall.Timespec{syscall.NsecToTimespec(t.UnixNano()), syscall.NsecToTimespec(t.UnixNano())}
	if _, _, e := syscall.Syscall6(syscall.SYS_UTIMENSAT, dir.Fd(), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&ts[0])), atSymlinkNofollow, 0, 0); e != 0 {
		return &os.PathError{Op: "utimensat", Path: name, Err: e}
	}
	return nil
}
