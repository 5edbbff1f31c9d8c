package harness

// MeteredUsage is token usage counted by outpost itself at the
// credential gateway, from the model API's own responses, rather than
// reported by the CLI. Its token fields are named as Usage's; Requests
// counts the model calls that reached the API, ReasoningTokens the part
// of OutputTokens the API reported as reasoning. Complete is false when
// some response's usage could not be read in full (a cut or malformed
// stream, a response still streaming): the counts are then a lower bound.
type MeteredUsage struct {
	Requests int64 `json:"requests"`
	Usage
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// Add returns u plus v; the sum is complete only if both are.
func (u MeteredUsage) Add(v MeteredUsage) MeteredUsage {
	return MeteredUsage{
		Requests:        u.Requests + v.Requests,
		Usage:           u.Usage.Add(v.Usage),
		ReasoningTokens: u.ReasoningTokens + v.ReasoningTokens,
	}
}

// Tokens is every token the API counted: input, output, cache reads and
// cache writes. Budgets are in these tokens.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Metered is metered usage in total and per model (the model the API
// named in its response, or the one requested).
type Metered struct {
	MeteredUsage
	ByModel map[string]MeteredUsage `json:"by_model,omitempty"`
}

// Add returns m plus v, per model and in total.
func (m Metered) Add(v Metered) Metered {
	out := Metered{MeteredUsage: m.MeteredUsage.Add(v.MeteredUsage)}
	if len(m.ByModel)+len(v.ByModel) > 0 {
		out.ByModel = make(map[string]MeteredUsage, len(m.ByModel)+len(v.ByModel))
		for _, src := range []map[string]MeteredUsage{m.ByModel, v.ByModel} {
			for k, u := range src {
				if have, ok := out.ByModel[k]; ok {
					out.ByModel[k] = have.Add(u)
				} else {
					out.ByModel[k] = u
				}
			}
		}
	}
	return out
}
