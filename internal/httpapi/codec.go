package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// jsonCodec is the transcoder's "json" codec: the proto3 JSON mapping
// with proto field names (snake_case), every field written (zeros
// included, so a reader finds each key), int64 as strings and enums as
// names; on input, an unknown field is refused rather than dropped, and
// any error names the field (fieldError).
type jsonCodec struct{ vanguard.JSONCodec }

// newJSONCodec returns the codec for vanguard.WithCodec, which asks for
// one on every call: on protoregistry.GlobalTypes, the resolver of a
// generated service such as breakerd's, the one built when the package
// loads (a codec only reads its options, so calls share it).
func newJSONCodec(res vanguard.TypeResolver) vanguard.Codec {
	if res == vanguard.TypeResolver(protoregistry.GlobalTypes) {
		return globalJSONCodec
	}
	return jsonCodecOn(res)
}

// globalJSONCodec is the codec on protoregistry.GlobalTypes.
var globalJSONCodec = jsonCodecOn(protoregistry.GlobalTypes)

// jsonCodecOn is the codec on the resolver res.
func jsonCodecOn(res vanguard.TypeResolver) vanguard.Codec {
	return jsonCodec{vanguard.JSONCodec{
		MarshalOptions:   protojson.MarshalOptions{Resolver: res, UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{Resolver: res},
	}}
}

// MarshalAppend appends msg in the codec's JSON form: by appendJSON's
// plan, or by protojson for what the plan leaves to it.
func (c jsonCodec) MarshalAppend(b []byte, msg proto.Message) ([]byte, error) {
	if out, ok := appendJSON(b, msg.ProtoReflect()); ok {
		return out, nil
	}
	return c.JSONCodec.MarshalAppend(b, msg)
}

// Unmarshal decodes data into msg; a failure is InvalidArgument naming
// the field, which the transcoder hands back as it is.
func (c jsonCodec) Unmarshal(data []byte, msg proto.Message) error {
	err := c.UnmarshalOptions.Unmarshal(data, msg)
	if err == nil {
		return nil
	}
	return fieldError(locate(msg.ProtoReflect().Descriptor(), data, err))
}

// fieldError is an InvalidArgument naming v.Field ("field: problem", the
// daemon's own form) with the violation as a google.rpc.BadRequest
// detail, which the error body renders as plain JSON.
func fieldError(v violation) error {
	if v.Field == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New(v.Description))
	}
	cerr := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", v.Field, v.Description))
	if d, err := connect.NewErrorDetail(v.badRequest()); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// locate finds what in data made protojson fail (err): the first unknown
// field or value of the wrong JSON type, by walking data against md. It
// names the field by its path ("ticket.generation", "records[2].outcome").
// A body that is not JSON at all, or a failure the walk does not find
// (an integer out of range, a field given twice), names no field and says
// what protojson said.
func locate(md protoreflect.MessageDescriptor, data []byte, err error) violation {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if derr := dec.Decode(&v); derr != nil {
		return violation{Description: "request body is not valid JSON: " + derr.Error()}
	}
	if path, problem := walkMessage(md, v, ""); path != "" {
		return violation{Field: path, Description: problem}
	}
	return violation{Description: "request body: " + err.Error()}
}

// walkMessage checks a JSON value against message md; path is where it
// sits ("" for the body). It returns the first bad field's path and
// problem, or "" when it found none.
func walkMessage(md protoreflect.MessageDescriptor, v any, path string) (string, string) {
	if v == nil || isWellKnown(md) {
		return "", ""
	}
	obj, ok := v.(map[string]any)
	if !ok {
		where := path
		if where == "" {
			where = "(body)"
		}
		return where, fmt.Sprintf("must be a JSON object (%s), got %s", md.FullName(), jsonType(v))
	}
	fields := md.Fields()
	for _, k := range sortedKeys(obj) {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByTextName(k)
		}
		p := join(path, k)
		if fd == nil {
			return p, fmt.Sprintf("unknown field: not a field of %s", md.FullName())
		}
		if bad, problem := walkField(fd, obj[k], p); bad != "" {
			return bad, problem
		}
	}
	return "", ""
}

// walkField checks the JSON value of field fd (a list, a map or one value).
func walkField(fd protoreflect.FieldDescriptor, v any, path string) (string, string) {
	switch {
	case v == nil:
		return "", ""
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			return path, "must be a JSON array, got " + jsonType(v)
		}
		for i, e := range arr {
			if bad, problem := walkValue(fd, e, fmt.Sprintf("%s[%d]", path, i)); bad != "" {
				return bad, problem
			}
		}
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return path, "must be a JSON object, got " + jsonType(v)
		}
		for _, k := range sortedKeys(obj) {
			if bad, problem := walkValue(fd.MapValue(), obj[k], fmt.Sprintf("%s[%q]", path, k)); bad != "" {
				return bad, problem
			}
		}
	default:
		return walkValue(fd, v, path)
	}
	return "", ""
}

// unknownEnum says that x is no value of e, and which are: the one x
// names without the values' prefix (OUTCOME_ for TIMEOUT), or else all
// but the unspecified zero.
func unknownEnum(e protoreflect.EnumDescriptor, x string) string {
	msg := fmt.Sprintf("unknown value %q of %s", x, e.FullName())
	vals := e.Values()
	zero := vals.ByNumber(0)
	if zero != nil {
		if prefix, ok := strings.CutSuffix(string(zero.Name()), "UNSPECIFIED"); ok && prefix != "" {
			if v := vals.ByName(protoreflect.Name(prefix + strings.ToUpper(x))); v != nil && v != zero {
				return fmt.Sprintf("%s; did you mean %s?", msg, v.Name())
			}
		}
	}
	names := make([]string, 0, vals.Len())
	for i := range vals.Len() {
		if v := vals.Get(i); v != zero {
			names = append(names, string(v.Name()))
		}
	}
	return msg + "; want one of " + strings.Join(names, ", ")
}

// walkValue checks one value of fd's kind, as the proto3 JSON mapping
// accepts it: 64-bit integers as numbers or strings, enums as names or
// numbers, bytes as base64 strings.
func walkValue(fd protoreflect.FieldDescriptor, v any, path string) (string, string) {
	if v == nil {
		return "", ""
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return walkMessage(fd.Message(), v, path)
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(x)) == nil {
				return path, unknownEnum(fd.Enum(), x)
			}
			return "", ""
		case json.Number:
			return intIn(x, 32, path)
		}
		return path, fmt.Sprintf("must be a %s name, got %s", fd.Enum().FullName(), jsonType(v))
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return path, "must be a JSON string, got " + jsonType(v)
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return path, "must be true or false, got " + jsonType(v)
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch v.(type) {
		case json.Number, string:
		default:
			return path, "must be a number, got " + jsonType(v)
		}
	default: // the integer kinds
		return integer(fd, v, path)
	}
	return "", ""
}

// integer checks an integer field's value: a JSON number, or a string
// holding one (how 64-bit integers are written), in the kind's range.
func integer(fd protoreflect.FieldDescriptor, v any, path string) (string, string) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	default:
		return path, "must be an integer (a number, or a string for 64-bit values), got " + jsonType(v)
	}
	bits := 64
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		bits = 32
	}
	return intIn(json.Number(s), bits, path)
}

// intIn checks that n is an integer that fits in bits.
func intIn(n json.Number, bits int, path string) (string, string) {
	if _, err := strconv.ParseInt(string(n), 10, bits); err != nil {
		if _, uerr := strconv.ParseUint(string(n), 10, bits); uerr != nil {
			return path, fmt.Sprintf("must be a %d-bit integer, got %s", bits, string(n))
		}
	}
	return "", ""
}

// isWellKnown reports the google.protobuf types, whose JSON forms are
// special (a Duration is "1.5s"): protojson's own error stands for them.
func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	}
	return fmt.Sprintf("%T", v)
}

// sortedKeys returns obj's keys in order, so the first bad field found
// is the same on every call.
func sortedKeys(obj map[string]any) []string { return slices.Sorted(maps.Keys(obj)) }
