package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// resolveIDs sets s.uid and s.gid from s.user ("uid", "uid:gid",
// "name", "name:group"), reading the image's /etc/passwd and /etc/group
// when a name is used or the group is implied, as the engine does when it
// starts a process: a uid without an entry gets gid 0.
func (s *Sandbox) resolveIDs(ctx context.Context) error {
	u, g, hasGroup := strings.Cut(s.user, ":")
	uid, uidErr := strconv.Atoi(u)
	numeric := uidErr == nil
	gid := 0
	if !numeric || !hasGroup {
		passwd, err := s.readImageFile(ctx, "/etc/passwd")
		if err != nil {
			return err
		}
		found := false
		for _, f := range fields(passwd, 7) {
			if f[0] == u || (numeric && f[2] == u) {
				uid, _ = strconv.Atoi(f[2])
				gid, _ = strconv.Atoi(f[3])
				found = true
				break
			}
		}
		if !numeric && !found {
			return fmt.Errorf("docker: user %q is not in the image's /etc/passwd (use uid:gid)", u)
		}
	}
	if hasGroup {
		n, err := strconv.Atoi(g)
		if err == nil {
			gid = n
		} else {
			group, err := s.readImageFile(ctx, "/etc/group")
			if err != nil {
				return err
			}
			found := false
			for _, f := range fields(group, 3) {
				if f[0] == g {
					gid, _ = strconv.Atoi(f[2])
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("docker: group %q is not in the image's /etc/group (use uid:gid)", g)
			}
		}
	}
	if uid < 0 || gid < 0 {
		return fmt.Errorf("docker: invalid user %q", s.user)
	}
	s.uid, s.gid = uid, gid
	return nil
}

// readImageFile reads a small file of the container's filesystem; a
// missing file reads as empty.
func (s *Sandbox) readImageFile(ctx context.Context, p string) ([]byte, error) {
	rc, _, err := s.eng.cli.CopyFromContainer(ctx, s.cid, p)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker: reading %s of the image: %w", p, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker: reading %s of the image: %w", p, err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, nil
	}
	return io.ReadAll(io.LimitReader(tr, 4<<20))
}

// fields splits colon-separated lines with at least n fields.
func fields(b []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}
