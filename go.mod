module github.com/outposthq/outpost

go 1.26
