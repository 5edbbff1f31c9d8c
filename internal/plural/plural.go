// Package plural writes counts in English for people: "1 problem",
// "2 problems".
package plural

import "strconv"

// N is n followed by word, with an "s" unless n is one.
func N(n int, word string) string {
	return Of(n, word, word+"s")
}

// Of is n followed by one or many, for words whose plural is not word+"s".
func Of(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
