package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// ErrBranchExists: Branch was asked for a branch the repository has.
var ErrBranchExists = errors.New("checkpoint: branch exists")

// Branch writes the commit tip and everything it reaches into the git
// repository that holds dir (found as git finds it: dir or a parent with a
// .git), and points refs/heads/NAME at it. An existing branch is
// ErrBranchExists unless force. It returns the number of objects copied.
func Branch(ctx context.Context, objs Objects, tip plumbing.Hash, dir, name string, force bool) (int, error) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return 0, fmt.Errorf("checkpoint: branch: %s: %w", dir, err)
	}
	ref := plumbing.NewBranchReferenceName(name)
	if err := ref.Validate(); err != nil || name == "" {
		return 0, fmt.Errorf("%w: branch name %q", ErrUnsafe, name)
	}
	if _, err := repo.Storer.Reference(ref); err == nil && !force {
		return 0, fmt.Errorf("%w: %s (give --force to move it)", ErrBranchExists, name)
	}
	all, err := Reachable(ctx, objs, []plumbing.Hash{tip})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range all {
		if repo.Storer.HasEncodedObject(o.Hash) == nil {
			continue
		}
		if _, err := repo.Storer.SetEncodedObject(memObject(o)); err != nil {
			return n, fmt.Errorf("checkpoint: branch: %w", err)
		}
		n++
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, tip)); err != nil {
		return n, fmt.Errorf("checkpoint: branch: %w", err)
	}
	return n, nil
}
