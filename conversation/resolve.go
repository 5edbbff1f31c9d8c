package conversation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MinPrefix is the shortest id prefix Resolve accepts.
const MinPrefix = 4

// Resolver is implemented by stores that resolve references more cheaply
// than through List (FS does); Resolve uses it. Implementations follow
// Resolve's rules.
type Resolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// Resolve returns the id of the one conversation in s that ref names,
// trying in order:
//
//  1. a stored conversation's full id;
//  2. the native id (Meta.Native) of exactly one conversation;
//  3. a prefix of exactly one conversation's id, at least MinPrefix long.
//
// It returns an error wrapping ErrAmbiguous when several conversations
// share the native id or the prefix (the message lists some), and
// ErrNotFound when nothing matches. Stores implementing Resolver resolve
// themselves; others are searched with Meta and List.
func Resolve(ctx context.Context, s Store, ref string) (string, error) {
	if r, ok := s.(Resolver); ok {
		return r.Resolve(ctx, ref)
	}
	if ValidID(ref) {
		_, err := s.Meta(ctx, ref)
		switch {
		case err == nil, errors.Is(err, ErrInvalid):
			return ref, nil // damaged but there: Get reports the damage
		case !errors.Is(err, ErrNotFound):
			return "", err
		}
	}
	ms, err := s.List(ctx)
	if err != nil {
		return "", err
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return resolve(ref, ids, func() ([]Meta, error) { return ms, nil })
}

// resolve applies Resolve's rules to the stored ids, reading metadata only
// when ref is not an id.
func resolve(ref string, ids []string, metas func() ([]Meta, error)) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("%w: empty reference", ErrNotFound)
	}
	if slices.Contains(ids, ref) {
		return ref, nil
	}
	ms, err := metas()
	if err != nil {
		return "", err
	}
	var natives []string
	for _, m := range ms {
		if m.Native == ref {
			natives = append(natives, m.ID)
		}
	}
	if id, ok, err := Pick(ref, "native id", natives); ok {
		return id, err
	}
	if len(ref) >= MinPrefix {
		var hits []string
		for _, id := range ids {
			if strings.HasPrefix(id, ref) {
				hits = append(hits, id)
			}
		}
		if id, ok, err := Pick(ref, "id prefix", hits); ok {
			return id, err
		}
	}
	return "", fmt.Errorf("%w: %q", ErrNotFound, ref)
}

// Pick is how Resolve takes the ids that ref, as a "native id" or an "id
// prefix" (what), matched; for Resolver implementations. One id is the
// answer; several are an ambiguous reference (the error, ok); none is not
// ok: the next kind of match is tried.
func Pick(ref, what string, ids []string) (id string, ok bool, err error) {
	switch len(ids) {
	case 0:
		return "", false, nil
	case 1:
		return ids[0], true, nil
	}
	return "", true, ambiguous(ref, what, ids)
}

func ambiguous(ref, what string, ids []string) error {
	slices.Sort(ids)
	const show = 5
	list := strings.Join(ids[:min(len(ids), show)], ", ")
	if len(ids) > show {
		list += fmt.Sprintf(" and %d more", len(ids)-show)
	}
	return fmt.Errorf("%w: %s %q matches %s", ErrAmbiguous, what, ref, list)
}

// SortMetas orders conversations as Store.List returns them, newest
// first: by Updated, then Created, then ID, all descending.
func SortMetas(ms []Meta) { sortMetas(ms) }

func sortMetas(ms []Meta) {
	slices.SortStableFunc(ms, func(a, b Meta) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
}

func sortDamage(ds []Damage) {
	slices.SortFunc(ds, func(a, b Damage) int { return cmp.Compare(a.ID, b.ID) })
}
