package main

import (
	"fmt"
	"io"
)

func plotMain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "plot: not yet")
	return 2
}
