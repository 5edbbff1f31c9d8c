package workspace

import (
	"archive/tar"
	"errors"
	"io"
	"strings"
)

// Entries reads the archive r for an extractor that follows symbolic
// links (a container's, a host's tar): it skips global headers, refuses
// what CheckEntry refuses (keeping the archive's own links as it goes),
// and calls fn with every other entry, whose content fn may read from tr.
func Entries(r io.Reader, fn func(h *tar.Header, tr *tar.Reader) error) error {
	tr := tar.NewReader(r)
	links := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if err := CheckEntry(h, links); err != nil {
			return err
		}
		links[strings.TrimSuffix(h.Name, "/")] = h.Typeflag == tar.TypeSymlink
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

// WriteEntry writes h to tw as PAX, without owner names, and a regular
// file's content from r.
func WriteEntry(tw *tar.Writer, h *tar.Header, r io.Reader) error {
	h.Uname, h.Gname = "", ""
	h.Format = tar.FormatPAX
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
		if _, err := io.Copy(tw, r); err != nil {
			return err
		}
	}
	return nil
}

// PipeTar streams the archive fill writes to send, as one reader: the
// archive is written while send reads it. fill's error comes first.
func PipeTar(fill func(*tar.Writer) error, send func(io.Reader) error) error {
	pr, pw := io.Pipe()
	filled := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		err := fill(tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
		filled <- err
	}()
	err := send(pr)
	pr.CloseWithError(io.ErrClosedPipe)
	if ferr := <-filled; ferr != nil && !errors.Is(ferr, io.ErrClosedPipe) {
		return ferr
	}
	return err
}

// CheckArchive copies the tar stream r to w, refusing unsafe entries and
// entries that pass through a symbolic link the same archive made
// (Entries): a provider spools an archive through it, whole, before it
// sends anything into a sandbox, so an archive that fails writes nothing.
func CheckArchive(r io.Reader, w io.Writer) error {
	tw := tar.NewWriter(w)
	if err := Entries(r, func(h *tar.Header, tr *tar.Reader) error { return WriteEntry(tw, h, tr) }); err != nil {
		return err
	}
	return tw.Close()
}
