package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/outposthq/outpost/conversation"
)

var _ conversation.Pager = (*Store)(nil)

// pageKey is a conversation's columns of the order of pages (migration
// 0005), at microseconds as conversation.KeyOf has them.
type pageKey struct{ updated, created time.Time }

func pageColumns(m conversation.Meta) pageKey {
	k := conversation.KeyOf(m)
	return pageKey{time.UnixMicro(k.Updated).UTC(), time.UnixMicro(k.Created).UTC()}
}

// ListPage implements conversation.Pager with one query on the index of
// the order of pages (outpost_conversations_page, or _owner_page for one
// owner's): it reads the page's rows only.
func (s *Store) ListPage(ctx context.Context, q conversation.PageQuery) ([]conversation.Meta, string, error) {
	if err := ready(ctx, "list-page"); err != nil {
		return nil, "", err
	}
	sql, args, err := pageSQL(q)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("conversation: list: %w", err)
	}
	defer rows.Close()
	out := []conversation.Meta{}
	var last conversation.PageKey
	for rows.Next() {
		var id string
		var rev int64
		var js []byte
		var updated, created time.Time
		if err := rows.Scan(&id, &rev, &js, &updated, &created); err != nil {
			return nil, "", fmt.Errorf("conversation: list: %w", err)
		}
		if len(out) == q.Limit {
			return out, last.Cursor(), rows.Err()
		}
		last = conversation.PageKey{Updated: updated.UnixMicro(), Created: created.UnixMicro(), ID: id}
		if m, err := decodeMeta(id, rev, js); err == nil {
			out = append(out, m)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("conversation: list: %w", err)
	}
	return out, "", nil
}

// pageSQL is ListPage's query: one more row than the page, to know
// whether another page follows.
func pageSQL(q conversation.PageQuery) (string, []any, error) {
	sql := `SELECT id, revision, meta, updated, created FROM outpost_conversations WHERE true`
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if q.Owner != nil {
		sql += ` AND owner = ` + arg(*q.Owner)
	}
	k, err := q.AfterKey()
	if err != nil {
		return "", nil, err
	}
	if k != nil {
		sql += fmt.Sprintf(` AND (updated, created, id) < (%s, %s, %s)`, arg(time.UnixMicro(k.Updated).UTC()), arg(time.UnixMicro(k.Created).UTC()), arg(k.ID))
	}
	return sql + ` ORDER BY updated DESC, created DESC, id DESC LIMIT ` + arg(q.Limit+1), args, nil
}
