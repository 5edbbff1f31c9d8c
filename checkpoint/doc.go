// Package checkpoint records a workspace's content as git objects, so the
// agent's work travels with its conversation (docs/workspaces.md): after
// every turn the workspace becomes a git commit (Snapshot, then Commit),
// parented on the previous turn's, content-addressed and incremental (a
// turn that changed three files stores three blobs and the trees above
// them). Materialize writes a checkpoint's tree into a fresh directory for
// a fork or a resume; Changes and Patch compare two trees; Apply merges a
// turn's change into a working tree, three-way, all or nothing; Branch
// writes a conversation's checkpoints into a git repository as commits.
//
// Objects are kept in an Objects store: Dir (a bare git repository that
// git itself reads), Memory, or a conversation store's own
// (conversation.ObjectStorer). Objects are made with go-git's plumbing; no
// git binary is needed.
//
// What a checkpoint leaves out: the top-level .outpost directory, every
// .git directory, and what the workspace's .gitignore files ignore (unless
// Options.Include names it). Symbolic links are stored as links and never
// followed; file modes are kept as git keeps them (executable or not).
// Options.Mask masks known secret values in a file's content before it is
// stored.
package checkpoint
