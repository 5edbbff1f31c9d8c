package server

import (
	"context"
	"os"
	"time"
)

// pushSpool stores the spooled turns in the store at start, then every
// Options.SpoolPush (negative: only at start), until Shutdown: a turn
// spooled while the store was down is stored once it is back, without a
// restart.
func (s *Server) pushSpool() {
	for {
		s.pushOnce()
		if s.o.SpoolPush < 0 {
			return
		}
		t := time.NewTimer(s.o.SpoolPush)
		select {
		case <-s.base.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// pushOnce pushes the spool once, logging each spooled turn's fate.
func (s *Server) pushOnce() {
	ctx, cancel := context.WithTimeout(s.base, 60*time.Second)
	defer cancel()
	pushed, err := s.o.Spool.Push(ctx, s.o.Store)
	for _, p := range pushed {
		switch {
		case p.Err != nil:
			s.log.Warn(s.o.Name+": spooled conversation not stored", "file", p.File, "err", p.Err.Error())
		default:
			s.log.Info(s.o.Name+": stored spooled turn", "conversation", p.ID, "stored", p.Stored)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn(s.o.Name+": pushing the spool", "dir", s.o.Spool.Dir(), "err", err.Error())
	}
}

// spoolSize counts the spooled files and their bytes, for the metrics.
func spoolSize(files []string) (n, size float64) {
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n++
			size += float64(fi.Size())
		}
	}
	return n, size
}
