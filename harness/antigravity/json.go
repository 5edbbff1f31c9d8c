package antigravity

import "github.com/outposthq/outpost/harness/kit"

// obj is the kit's tolerant JSON object reader.
type obj = kit.Obj

func parseObj(b []byte) obj { return kit.Parse(b) }
