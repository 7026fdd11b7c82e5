package httpapi

import (
	"cmp"
	"encoding/base64"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// appendJSON appends m as the codec's protojson options write it
// (UseProtoNames, EmitUnpopulated; compact), from a plan built once per
// message type instead of protojson's walk of the descriptors on every
// call: an Allow answer's 50 fields cost protojson about 20 µs. ok is
// false, with b unchanged, when m holds what the plan leaves to protojson:
// a well-known type (their JSON forms are protojson's own), extensions,
// proto2's required fields, or a string that is not UTF-8 (protojson's
// error names the field).
// TestAppendJSONIsProtojsons holds the two to the same bytes.
func appendJSON(b []byte, m protoreflect.Message) (out []byte, ok bool) {
	p := planOf(m.Descriptor())
	if out, ok = p.append(b, m); !ok {
		return b, false
	}
	return out, true
}

// plan is how one message type is written: its fields in declaration
// order, as protojson ranges them. fallback marks a type left to protojson.
type plan struct {
	fields   []fieldPlan
	fallback bool
}

// fieldPlan is one field: its key (`"name":`), whether it is skipped
// (in a oneof, proto3 optional included) or written null (a message)
// when unset, and the plan of its message type, if any.
type fieldPlan struct {
	fd       protoreflect.FieldDescriptor
	key      string
	inOneof  bool
	presence bool
	sub      *plan // a message field's, a list's of messages, a map's values
}

// plans holds the plans by message descriptor (a generated type's is
// one value for the life of the process; two descriptors of one name may
// differ, so the name is not the key).
var (
	plansMu sync.Mutex
	plans   sync.Map // protoreflect.MessageDescriptor -> *plan
)

// planOf returns md's plan, building it (and its messages' plans) on the
// first call. A plan is published only once whole; one under
// construction is found by the messages that refer back to it.
func planOf(md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(md); ok {
		return p.(*plan)
	}
	plansMu.Lock()
	defer plansMu.Unlock()
	building := map[protoreflect.MessageDescriptor]*plan{}
	p := buildPlan(md, building)
	for d, bp := range building {
		plans.LoadOrStore(d, bp)
	}
	return p
}

// buildPlan builds md's plan, recording it in building before its fields
// so that a message that holds itself refers to the same plan.
func buildPlan(md protoreflect.MessageDescriptor, building map[protoreflect.MessageDescriptor]*plan) *plan {
	if p, ok := plans.Load(md); ok {
		return p.(*plan)
	}
	if p, ok := building[md]; ok {
		return p
	}
	p := &plan{}
	building[md] = p
	if md.FullName().Parent() == "google.protobuf" || md.ExtensionRanges().Len() > 0 {
		p.fallback = true
		return p
	}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			p.fallback = true // protojson's error when it is missing
			return p
		}
		f := fieldPlan{
			fd:       fd,
			key:      string(appendKey(nil, fd.TextName())),
			inOneof:  fd.ContainingOneof() != nil,
			presence: fd.HasPresence(),
		}
		if fd.IsMap() {
			f.sub = messagePlan(fd.MapValue(), building)
		} else {
			f.sub = messagePlan(fd, building)
		}
		p.fields = append(p.fields, f)
	}
	return p
}

// messagePlan is the plan of fd's message type, or nil for a scalar.
func messagePlan(fd protoreflect.FieldDescriptor, building map[protoreflect.MessageDescriptor]*plan) *plan {
	if fd.Message() == nil {
		return nil
	}
	return buildPlan(fd.Message(), building)
}

// appendKey appends `"name":`.
func appendKey(b []byte, name string) []byte {
	b, _ = appendString(b, name)
	return append(b, ':')
}

// append writes m as an object; false when a part of it is left to
// protojson.
func (p *plan) append(b []byte, m protoreflect.Message) ([]byte, bool) {
	if p.fallback {
		return b, false
	}
	b = append(b, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		if (f.inOneof || f.presence) && !m.Has(f.fd) {
			if f.inOneof {
				continue
			}
			b = f.appendKey(b, &first)
			b = append(b, "null"...)
			continue
		}
		b = f.appendKey(b, &first)
		var ok bool
		if b, ok = f.appendValue(b, m.Get(f.fd)); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendKey writes the comma before every field but the first, then the key.
func (f *fieldPlan) appendKey(b []byte, first *bool) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	return append(b, f.key...)
}

// appendValue writes a field's value: a list, a map or one value.
func (f *fieldPlan) appendValue(b []byte, v protoreflect.Value) ([]byte, bool) {
	switch {
	case f.fd.IsList():
		return f.appendList(b, v.List())
	case f.fd.IsMap():
		return f.appendMap(b, v.Map())
	}
	return appendSingular(b, f.fd, f.sub, v)
}

func (f *fieldPlan) appendList(b []byte, l protoreflect.List) ([]byte, bool) {
	b = append(b, '[')
	for i := range l.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendSingular(b, f.fd, f.sub, l.Get(i)); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendMap writes a map's entries in protojson's key order: false before
// true, numbers ascending, strings by bytes.
func (f *fieldPlan) appendMap(b []byte, mp protoreflect.Map) ([]byte, bool) {
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, compareKeys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendString(b, k.String()); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendSingular(b, f.fd.MapValue(), f.sub, mp.Get(k)); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// compareKeys orders map keys as protojson's order.GenericKeyOrder does.
func compareKeys(x, y protoreflect.MapKey) int {
	switch x.Interface().(type) {
	case bool:
		return compareBools(x.Bool(), y.Bool())
	case int32, int64:
		return cmp.Compare(x.Int(), y.Int())
	case uint32, uint64:
		return cmp.Compare(x.Uint(), y.Uint())
	}
	return cmp.Compare(x.String(), y.String())
}

func compareBools(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	}
	return 1
}

// appendSingular writes one value of fd's kind as protojson does: 64-bit
// integers as strings, enums by name (by number when unknown), bytes in
// padded base64, floats with NaN and the infinities as strings.
func appendSingular(b []byte, fd protoreflect.FieldDescriptor, sub *plan, v protoreflect.Value) ([]byte, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool()), true
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendUint(b, v.Uint(), 10), '"'), true
	case protoreflect.FloatKind:
		return appendFloat(b, v.Float(), 32), true
	case protoreflect.DoubleKind:
		return appendFloat(b, v.Float(), 64), true
	case protoreflect.BytesKind:
		b = append(b, '"')
		return append(base64.StdEncoding.AppendEncode(b, v.Bytes()), '"'), true
	case protoreflect.EnumKind:
		return appendEnum(b, fd, v.Enum()), true
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return sub.append(b, v.Message())
	}
	return b, false
}

// appendEnum writes an enum value's name, its number when the descriptor
// has no such value, and null for google.protobuf.NullValue.
func appendEnum(b []byte, fd protoreflect.FieldDescriptor, n protoreflect.EnumNumber) []byte {
	if fd.Enum().FullName() == "google.protobuf.NullValue" {
		return append(b, "null"...)
	}
	if ev := fd.Enum().Values().ByNumber(n); ev != nil {
		b = append(b, '"')
		return append(append(b, ev.Name()...), '"')
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// appendString writes s quoted, escaping what protojson escapes: '"', '\'
// and the control characters. False when s is not UTF-8.
func appendString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i, r := range s {
		if r >= ' ' && r != '"' && r != '\\' && r != utf8.RuneError {
			continue
		}
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return b, false
			}
			continue
		}
		b = append(b, s[start:i]...)
		b = appendEscape(b, r)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// appendEscape writes the escape of r, an ASCII control character, '"' or '\'.
func appendEscape(b []byte, r rune) []byte {
	b = append(b, '\\')
	switch r {
	case '"', '\\':
		return append(b, byte(r))
	case '\b':
		return append(b, 'b')
	case '\f':
		return append(b, 'f')
	case '\n':
		return append(b, 'n')
	case '\r':
		return append(b, 'r')
	case '\t':
		return append(b, 't')
	}
	b = append(b, 'u')
	b = append(b, "0000"[1+(bits.Len32(uint32(r))-1)/4:]...)
	return strconv.AppendUint(b, uint64(r), 16)
}

// appendFloat writes n as protojson does: encoding/json's number form
// (exponent below 1e-6 and from 1e21), NaN and the infinities as strings.
func appendFloat(b []byte, n float64, bitSize int) []byte {
	switch {
	case math.IsNaN(n):
		return append(b, `"NaN"`...)
	case math.IsInf(n, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(b, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, n, format, -1, bitSize)
	if format == 'e' {
		// "1e-07" as "1e-7", as encoding/json writes it.
		if k := len(b); k >= 4 && b[k-4] == 'e' && b[k-3] == '-' && b[k-2] == '0' {
			b[k-2] = b[k-1]
			b = b[:k-1]
		}
	}
	return b
}
