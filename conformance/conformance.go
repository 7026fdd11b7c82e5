// Package conformance holds the cases and templates every breakerd client
// is held to (README.md in this folder); Go code reads the templates and
// the local fallback's denials from it, so the text a model reads has one
// source.
package conformance

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
)

//go:embed templates/*.tmpl fallback_denials.json
var files embed.FS

//go:embed client_rules.json
var clientRules []byte

//go:embed classification.json
var classification []byte

//go:embed render.json
var renderJSON []byte

// RenderInput is a case's input in render.json: one denial's fields, or
// (a notice) Denials.
type RenderInput struct {
	Tool          string        `json:"tool"`
	Status        string        `json:"status"`
	Reason        string        `json:"reason"`
	Forced        bool          `json:"forced"`
	Degraded      bool          `json:"degraded"`
	Scope         string        `json:"scope"`
	Alternatives  []string      `json:"alternatives"`
	MayReturnAtMs int64         `json:"may_return_at_ms"`
	Denials       []RenderInput `json:"denials"`
}

// RenderCase is one case of render.json (README.md, "render.json").
type RenderCase struct {
	Name     string      `json:"name"`
	Template string      `json:"template"`
	Fallback string      `json:"fallback"`
	Input    RenderInput `json:"input"`
	NowMs    int64       `json:"now_ms"`
	Want     string      `json:"want"`
}

// ReadRender decodes render.json's cases of the denial templates
// (tool_result, notice); an unknown field, or no case, is an error.
func ReadRender() ([]RenderCase, error) {
	f, err := readRenderFile()
	if err != nil {
		return nil, err
	}
	return f.Cases, nil
}

type renderFile struct {
	Cases []RenderCase `json:"cases"`
}

func readRenderFile() (renderFile, error) {
	var f renderFile
	if err := decodeStrict(renderJSON, &f); err != nil {
		return f, fmt.Errorf("conformance: render.json: %w", err)
	}
	if len(f.Cases) == 0 {
		return f, fmt.Errorf("conformance: render.json holds no case")
	}
	return f, nil
}

// ClassificationRow is one row of classification.json (README.md,
// "classification.json").
type ClassificationRow struct {
	Name                string          `json:"name"`
	Evidence            json.RawMessage `json:"evidence"`
	DeadlineMs          int64           `json:"deadline_ms"`
	BareRateLimitWaitMs int64           `json:"bare_rate_limit_wait_ms"`
	CountUnrecognised   bool            `json:"count_unrecognised"`
	NowMs               int64           `json:"now_ms"`
	Want                struct {
		Outcome      string `json:"outcome"`
		RetryAfterMs int64  `json:"retry_after_ms"`
		Counts       bool   `json:"counts"`
		Why          string `json:"why"`
	} `json:"want"`
}

// ReadClassification decodes classification.json's rows; an unknown
// field, or no row, is an error.
func ReadClassification() ([]ClassificationRow, error) {
	var f struct {
		Rows []ClassificationRow `json:"rows"`
	}
	if err := decodeStrict(classification, &f); err != nil {
		return nil, fmt.Errorf("conformance: classification.json: %w", err)
	}
	if len(f.Rows) == 0 {
		return nil, fmt.Errorf("conformance: classification.json holds no row")
	}
	return f.Rows, nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// ClientRules is client_rules.json: what a client's local fallback keeps
// (README.md, "client_rules.json").
type ClientRules struct {
	Defaults struct {
		Threshold      int64 `json:"threshold"`
		CooldownBaseMs int64 `json:"cooldown_base_ms"`
		CooldownCapMs  int64 `json:"cooldown_cap_ms"`
		ProbeTimeoutMs int64 `json:"probe_timeout_ms"`
	} `json:"defaults"`
	WaitHeaders        []string `json:"wait_headers"`
	WaitHeaderPrefixes []string `json:"wait_header_prefixes"`
	FallbackCounts     []string `json:"fallback_counts"`
}

// ReadClientRules decodes client_rules.json; an unknown field is an
// error.
func ReadClientRules() (ClientRules, error) {
	var r ClientRules
	if err := decodeStrict(clientRules, &r); err != nil {
		return ClientRules{}, fmt.Errorf("conformance: client_rules.json: %w", err)
	}
	return r, nil
}

// Template returns the named template (tool_result or notice) as
// README.md defines it: the file's text without its final newline.
func Template(name string) (string, error) {
	b, err := files.ReadFile("templates/" + name + ".tmpl")
	if err != nil {
		return "", err
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b), nil
}

// Words is a denial's status word and reason.
type Words struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// FallbackDenials are the local fallback's own denials
// (fallback_denials.json): the only denials a client words itself.
type FallbackDenials struct {
	Open          Words `json:"open"`
	ProbeInFlight Words `json:"probe_in_flight"`
}

// Fallback returns fallback_denials.json, refusing a file that leaves a
// word out.
func Fallback() (FallbackDenials, error) {
	var f FallbackDenials
	b, err := files.ReadFile("fallback_denials.json")
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err == nil && (f.Open.Status == "" || f.Open.Reason == "" || f.ProbeInFlight.Status == "" || f.ProbeInFlight.Reason == "") {
		err = fmt.Errorf("every denial needs a status and a reason")
	}
	if err != nil {
		return FallbackDenials{}, fmt.Errorf("conformance: fallback_denials.json: %w", err)
	}
	return f, nil
}
