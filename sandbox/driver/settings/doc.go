// Package settings is the one vocabulary and the one parser of provider
// settings: the string keys a user gives with `outpost run --set key=value`
// (or the HTTP API's "settings") and that sandbox.Open passes to a
// provider's driver.Factory.
//
// Each provider declares its keys once, as a Set of Key values (name,
// kind, allowed values, default, description); keys two providers share
// (image, cpu, memory, user, workspace, ...) are declared here, in Common,
// so they have one name and one meaning everywhere. Set.Parse checks a
// settings map against the declarations and returns typed Values; its
// errors are configuration-coded *outpost.Error values that name the bad
// key, list the known ones, suggest the nearest ("did you mean cpu?") and
// name the current spelling of a former one (cpus, outpost-image).
// Set.Table renders the declarations as the tables of docs/sandboxes, so
// the documentation cannot drift from the code.
//
// Names are snake_case (docs/sandboxes/settings.md says why). The package
// imports only the standard library and the root error package.
package settings
