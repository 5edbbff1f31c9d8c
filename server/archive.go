package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
)

// exportConversation writes the conversation's portable archive (what
// `outpost conversations export` writes, conversation.Export).
func (s *Server) exportConversation(w http.ResponseWriter, r *http.Request, id string, m conversation.Meta) {
	h := w.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", m.ID+".conv"))
	// Export reads the conversation before it writes a byte: a failure
	// to read it is still an error response.
	if err := conversation.Export(r.Context(), s.o.Store, m.ID, w); err != nil {
		writeErr(w, outpost.Wrap(outpost.Conversation, "export", err))
	}
}

// importConversation stores an archive of exportConversation (a body of
// at most MaxBody bytes) under its own id: 201 with its metadata; 409 when
// the store holds that id; 400 when the archive is malformed or unsafe.
func (s *Server) importConversation(w http.ResponseWriter, r *http.Request) {
	st, err := s.store()
	if err != nil {
		writeErr(w, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.o.MaxBody)
	// The import is its importer's, whoever the archive says made it.
	owner := principalOf(r.Context()).owner
	m, err := conversation.Import(r.Context(), st, body, &conversation.ImportOptions{Owner: owner})
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		s.metrics.rejected.WithLabelValues(ReasonTooLarge).Inc()
		writeErr(w, fail(outpost.Configuration, ReasonTooLarge, fmt.Sprintf("the body is over the limit of %d bytes", s.o.MaxBody)))
	case errors.Is(err, conversation.ErrExist):
		writeErr(w, fail(outpost.Refused, ReasonConflict, "the store already holds this conversation"))
	case errors.Is(err, conversation.ErrInvalid), errors.Is(err, conversation.ErrUnsafe):
		writeErr(w, fail(outpost.Conversation, ReasonBadRequest, err.Error()))
	case err != nil:
		writeErr(w, outpost.Wrap(outpost.Conversation, "import", err))
	default:
		w.Header().Set("Location", "/v1/conversations/"+m.ID)
		writeJSON(w, http.StatusCreated, m)
	}
}
