package conversation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PageQuery asks for one page of the stored conversations, newest first.
type PageQuery struct {
	// After is the cursor of the page before (ListPage's next); "" asks
	// for the first page.
	After string
	// Limit is the page's size, at least 1.
	Limit int
	// Owner, when not nil, keeps only the conversations of that owner
	// (Meta.Owner): a client of `outpost serve` pages through its own.
	Owner *string
}

// Pager is implemented by stores that read one page of the stored
// conversations without reading the others (postgres.Store, from an
// index): ListPage then costs the page, not the store.
type Pager interface {
	ListPage(ctx context.Context, q PageQuery) (page []Meta, next string, err error)
}

// AfterKey checks q (Limit at least 1, After a cursor a page gave) and
// returns the key its After names (nil for the first page): what every
// ListPage, a Pager's included, does first.
func (q PageQuery) AfterKey() (*PageKey, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("conversation: list: page limit %d: want at least 1", q.Limit)
	}
	if q.After == "" {
		return nil, nil
	}
	k, err := ParseCursor(q.After)
	if err != nil {
		return nil, err
	}
	return &k, nil
}

// ErrCursor is a PageQuery.After that no ListPage returned.
var ErrCursor = errors.New("invalid page cursor")

// ListPage returns up to q.Limit conversations after q.After, in the
// order of pages (PageOrder: List's, at microseconds), and the cursor of
// the next page ("" when this one is the last). A Pager reads the page
// alone; other stores are listed whole and cut.
func ListPage(ctx context.Context, s Store, q PageQuery) ([]Meta, string, error) {
	after, err := q.AfterKey()
	if err != nil {
		return nil, "", err
	}
	if p, ok := s.(Pager); ok {
		return p.ListPage(ctx, q)
	}
	all, err := s.List(ctx)
	if err != nil {
		return nil, "", err
	}
	slices.SortStableFunc(all, func(a, b Meta) int { return KeyOf(b).Compare(KeyOf(a)) })
	var page []Meta
	for _, m := range all {
		if (q.Owner != nil && m.Owner != *q.Owner) || (after != nil && KeyOf(m).Compare(*after) >= 0) {
			continue
		}
		if len(page) == q.Limit {
			return page, KeyOf(page[len(page)-1]).Cursor(), nil
		}
		page = append(page, m)
	}
	return page, "", nil
}

// PageKey is a conversation's place in the order of pages: Updated, then
// Created, then ID, newest first; the times at microseconds, as a
// database keeps them.
type PageKey struct {
	Updated, Created int64 // Unix microseconds
	ID               string
}

// KeyOf is m's PageKey.
func KeyOf(m Meta) PageKey {
	return PageKey{Updated: micros(m.Updated), Created: micros(m.Created), ID: m.ID}
}

func micros(t time.Time) int64 { return t.Truncate(time.Microsecond).UnixMicro() }

// Compare orders keys oldest first (pages go the other way).
func (k PageKey) Compare(o PageKey) int {
	if c := cmp.Compare(k.Updated, o.Updated); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Created, o.Created); c != 0 {
		return c
	}
	return cmp.Compare(k.ID, o.ID)
}

// Cursor is the key as a page cursor: "UPDATED.CREATED.ID".
func (k PageKey) Cursor() string {
	return strconv.FormatInt(k.Updated, 10) + "." + strconv.FormatInt(k.Created, 10) + "." + k.ID
}

// ParseCursor reads a cursor Cursor wrote (ErrCursor otherwise).
func ParseCursor(s string) (PageKey, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) == 3 && ValidID(parts[2]) {
		u, err1 := strconv.ParseInt(parts[0], 10, 64)
		c, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 == nil && err2 == nil {
			return PageKey{Updated: u, Created: c, ID: parts[2]}, nil
		}
	}
	return PageKey{}, fmt.Errorf("conversation: list: %w %q", ErrCursor, s)
}
