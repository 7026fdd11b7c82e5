// Package codecheck holds the repository's checks on its own Go code:
// no product function over MaxFuncLines lines (funclen_test.go), and the
// import graph's two rules (imports_test.go). It has no code of its own.
package codecheck

// MaxFuncLines is the longest a product function may be, in lines from
// its func keyword to its closing brace: a function per screen.
const MaxFuncLines = 80
