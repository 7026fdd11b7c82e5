//go:build race

package main

// raceBuild tells whether this test binary was built with -race.
const raceBuild = true
