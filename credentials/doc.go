// Package credentials resolves the variables a turn may draw on, applies
// credential and configuration plans to a sandbox, and redacts secret
// values from everything outpost prints, logs or stores.
//
// Resolution: a lookup table of the process environment with the
// working directory's .outpost/.env over it (loaded with godotenv). The
// table is not the agent's environment: what reaches the agent is the
// plain settings of .outpost/.env (its secrets only through a plan), what
// its plans select from the table, its preset's Variables, the caller's
// explicit values and a small allowlist the provider passes (PATH, LANG,
// TZ, TERM); Environment holds these rules.
//
// A variable is a secret when its name or its value looks like one
// (IsSecret: LooksSecret, KeyShaped). Secrets are redacted (Redactor)
// from everything outpost prints, logs or stores.
package credentials
