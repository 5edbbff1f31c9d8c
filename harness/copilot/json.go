package copilot

import "github.com/outposthq/outpost/internal/jsonobj"

// obj is the tolerant JSON object reader the presets share.
type obj = jsonobj.Obj

func parseObj(b []byte) obj { return jsonobj.Parse(b) }
