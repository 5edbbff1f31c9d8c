package sandbox

import (
	"fmt"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Open returns the provider registered (driver.Register) under name,
// configured with settings. An unknown name or settings the provider
// refuses are configuration errors.
func Open(name string, settings map[string]string) (driver.Provider, error) {
	f, ok := driver.Lookup(name)
	if !ok {
		return nil, &outpost.Error{Code: outpost.Configuration, Op: "sandbox", Msg: fmt.Sprintf("%q (known: %v)", name, driver.Names()), Err: driver.ErrUnknown}
	}
	p, err := f(settings)
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "sandbox", err)
	}
	return p, nil
}

// Providers lists the registered provider names.
func Providers() []string { return driver.Names() }
