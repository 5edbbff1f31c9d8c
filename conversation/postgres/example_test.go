package postgres_test

import (
	"context"
	"fmt"
	"log"

	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/providers/local"
)

// A PostgreSQL store that a fleet shares: a turn run on one machine is
// stored in the database, and any machine with the same store resumes or
// forks it. Open creates or upgrades the schema.
func ExampleOpen() {
	ctx := context.Background()
	store, err := postgres.Open(ctx, "postgres://outpost@db.internal:5432/outpost", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	echo, _ := presets.Lookup("echo")
	agent := harness.Agent{Kind: harness.KindCLI, Harness: echo}
	opts := &engine.RunOptions{Provider: local.New(nil), Store: store}
	first, err := engine.Run(ctx, engine.Turn{Agent: agent, Prompt: "plan the change"}, opts)
	if err != nil {
		log.Fatal(err)
	}
	// Here or on another machine with the same store:
	next, err := engine.Run(ctx, engine.Turn{Agent: agent, Prompt: "now do it", Resume: first.Conversation}, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(next.Text)
}
