//go:build unix

package checkpoint

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// statAt reads name's stat relative to the open directory dir, without
// following a link; false when it vanished.
func statAt(dir *os.File, name string) (stat, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return stat{}, false
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	default:
		mode |= fs.ModeIrregular
	}
	return stat{Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: uint64(st.Ino), Mode: uint32(mode)}, true
}
