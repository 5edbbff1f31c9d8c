package sandbox

import (
	"context"
	"errors"
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

// Collect removes what dead outpost processes left behind in p's
// sandboxes (driver.Collector): what `outpost gc` runs. A provider that
// cannot gives a configuration error satisfying
// errors.Is(err, errors.ErrUnsupported); a failure of the sweep is code
// sandbox (a coded error from the provider, such as an unverified host
// key, keeps its code), returned with what the sweep did.
func Collect(ctx context.Context, p driver.Provider, opts driver.CollectOptions) (driver.Collection, error) {
	c, ok := p.(driver.Collector)
	if !ok {
		return driver.Collection{}, &outpost.Error{Code: outpost.Configuration, Op: "gc",
			Msg: fmt.Sprintf("the %s sandbox cannot collect what dead processes left", p.Name()), Err: errors.ErrUnsupported}
	}
	col, err := c.Collect(ctx, opts)
	switch {
	case err == nil:
		return col, nil
	case errors.As(err, new(*outpost.Error)):
		return col, err
	case ctx.Err() != nil:
		return col, ctxError(ctx, "gc", err)
	}
	return col, &outpost.Error{Code: outpost.Sandbox, Op: "gc", Err: err}
}

// Sweep starts p's periodic removal of what dead owners left behind
// (driver.Sweeper) and reports whether p has one. A process that serves
// sandboxes calls it at start; a provider otherwise starts it with its
// first sandbox.
func Sweep(p driver.Provider) bool {
	sw, ok := p.(driver.Sweeper)
	if ok {
		sw.Sweep()
	}
	return ok
}
