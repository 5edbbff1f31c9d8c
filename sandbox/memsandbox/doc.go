// Package memsandbox is a real sandbox provider that keeps everything in
// memory, for tests of code built on sandboxes (the turn engine, stores,
// bootstrap) that need no host processes or Docker.
//
// Each sandbox has its own file tree (directories, regular files with
// modes, symbolic links, hard links) shared by its processes and by
// CopyIn/CopyOut, which read and write real tar streams. Processes are Go
// functions from a program table (Program), started by name: each gets its
// arguments, environment, working directory, streaming standard input,
// output and error, and the sandbox's files (FS). A program may start
// background members of its process group (Proc.Go); the output streams
// end when the whole group has ended, as with real pipes.
//
// Signals: Terminate cancels the program's context; Kill also closes its
// streams and lets Wait return at once. A program must honour its context
// to stop when signalled. The provider can make a sandbox vanish behind
// its user's back (Provider.Remove), and counts Open calls and live
// sandboxes (Opens, Live) so tests can prove a refusal happened before any
// allocation and that every lease was released.
//
// Every sandbox passes the conformance suite in sandbox/sandboxtest. The
// provider registers itself as "memory" in the sandbox registry.
package memsandbox
