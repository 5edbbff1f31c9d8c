package driver

// NewFactory is the Factory of a provider whose settings parse into
// options for its constructor: parse (the provider's ParseSettings, whose
// errors name the setting), then make (its New).
func NewFactory[O any, P Provider](parse func(map[string]string) (O, error), make func(O) (P, error)) Factory {
	return func(settings map[string]string) (Provider, error) {
		o, err := parse(settings)
		if err != nil {
			return nil, err
		}
		p, err := make(o)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return p, nil
	}
}
