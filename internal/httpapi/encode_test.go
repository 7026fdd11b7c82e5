package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	breakerdv1 "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestAppendJSONIsProtojsons holds appendJSON to protojson with the
// codec's options: every message of breakerd's API, and a test type with
// every kind the API does not use (bytes, float, unsigned and fixed
// integers, maps keyed by numbers and bools, a message that holds
// itself), each filled at random many times, must give protojson's
// bytes (its whitespace, which varies by build, taken out), as a
// dynamic message and as its generated type.
func TestAppendJSONIsProtojsons(t *testing.T) {
	opts := globalJSONCodec.(jsonCodec).MarshalOptions
	var types []protoreflect.MessageDescriptor
	for _, fd := range []protoreflect.FileDescriptor{breakerdv1.File_breakerd_v1_breaker_proto, breakerdv1.File_breakerd_v1_watch_snapshot_proto} {
		types = appendMessages(types, fd.Messages())
	}
	types = append(types, kindsType(t))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, md := range types {
		for i := range 50 {
			m := dynamicpb.NewMessage(md)
			fill(rng, m, 0)
			want, err := opts.Marshal(m)
			if err != nil {
				t.Fatalf("%s #%d: protojson: %v", md.FullName(), i, err)
			}
			got, ok := appendJSON([]byte("prefix"), m)
			if !ok {
				t.Fatalf("%s #%d: appendJSON left it to protojson", md.FullName(), i)
			}
			got = bytes.TrimPrefix(got, []byte("prefix"))
			if !bytes.Equal(got, compact(t, want)) {
				t.Fatalf("%s #%d:\n got %s\nwant %s", md.FullName(), i, got, want)
			}
			if gen := generated(t, m); gen != nil {
				if out, ok := appendJSON(nil, gen.ProtoReflect()); !ok || !bytes.Equal(out, got) {
					t.Fatalf("%s #%d: the generated type's JSON differs:\n got %s\nwant %s", md.FullName(), i, out, got)
				}
			}
		}
	}
}

// TestCodecLeavesToProtojson: what appendJSON does not write, the codec
// writes by protojson (well-known types) or refuses as protojson does (a
// string that is not UTF-8, named by its field).
func TestCodecLeavesToProtojson(t *testing.T) {
	c := globalJSONCodec.(jsonCodec)
	for _, m := range []proto.Message{durationpb.New(1500_000_000), &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNumberValue(1)}}} {
		if _, ok := appendJSON(nil, m.ProtoReflect()); ok {
			t.Errorf("%T: appendJSON wrote a well-known type", m)
		}
		got, err := c.MarshalAppend(nil, m)
		want, _ := c.MarshalOptions.Marshal(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T: got %s (%v), want %s", m, got, err, want)
		}
	}
	bad := &breakerdv1.AllowResponse{State: &breakerdv1.BreakerState{Breaker: "web\xffsearch"}}
	if out, ok := appendJSON([]byte("x"), bad.ProtoReflect()); ok || string(out) != "x" {
		t.Errorf("appendJSON of invalid UTF-8: %q, %v; want the base back and false", out, ok)
	}
	_, err := c.MarshalAppend(nil, bad)
	_, want := c.MarshalOptions.Marshal(bad)
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("invalid UTF-8: error %v, want protojson's %v", err, want)
	}
}

// BenchmarkAnswerJSON writes a healthy Allow's answer, as the HTTP/JSON
// API does on every Allow.
func BenchmarkAnswerJSON(b *testing.B) {
	m := &breakerdv1.AllowResponse{
		Decision: breakerdv1.Decision_DECISION_ALLOWED,
		Ticket:   &breakerdv1.Ticket{},
		State:    &breakerdv1.BreakerState{Breaker: "web_search", State: breakerdv1.State_STATE_CLOSED},
	}
	for _, c := range []struct {
		name string
		enc  func([]byte, proto.Message) ([]byte, error)
	}{
		{"plan", globalJSONCodec.MarshalAppend},
		{"protojson", globalJSONCodec.(jsonCodec).JSONCodec.MarshalAppend},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4096)
			for b.Loop() {
				out, err := c.enc(buf[:0], m)
				if err != nil {
					b.Fatal(err)
				}
				buf = out
			}
		})
	}
}

// generated is m as its generated type, nil for a type with none.
func generated(t *testing.T, m *dynamicpb.Message) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Descriptor().FullName())
	if err != nil {
		return nil
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	gen := mt.New().Interface()
	if err := proto.Unmarshal(data, gen); err != nil {
		t.Fatal(err)
	}
	return gen
}

// compact is data with the whitespace between JSON tokens taken out.
func compact(t *testing.T, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		t.Fatalf("not JSON (%v): %s", err, data)
	}
	return out.Bytes()
}

func appendMessages(out []protoreflect.MessageDescriptor, mds protoreflect.MessageDescriptors) []protoreflect.MessageDescriptor {
	for i := range mds.Len() {
		md := mds.Get(i)
		if !md.IsMapEntry() {
			out = append(out, md)
		}
		out = appendMessages(out, md.Messages())
	}
	return out
}

// kindsType is a message type with the kinds breakerd's API lacks.
func kindsType(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	opt, rep := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	entry := func(name string, key descriptorpb.FieldDescriptorProto_Type, val descriptorpb.FieldDescriptorProto_Type, valName string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{
			Name:    proto.String(name),
			Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, key, opt, ""), field("value", 2, val, opt, valName)},
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
		}
	}
	kinds := &descriptorpb.DescriptorProto{
		Name: proto.String("Kinds"),
		Field: []*descriptorpb.FieldDescriptorProto{
			field("raw", 1, descriptorpb.FieldDescriptorProto_TYPE_BYTES, opt, ""),
			field("ratio", 2, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, opt, ""),
			field("big", 3, descriptorpb.FieldDescriptorProto_TYPE_UINT64, opt, ""),
			field("small", 4, descriptorpb.FieldDescriptorProto_TYPE_FIXED32, opt, ""),
			field("signed", 5, descriptorpb.FieldDescriptorProto_TYPE_SINT64, opt, ""),
			field("count", 6, descriptorpb.FieldDescriptorProto_TYPE_UINT32, opt, ""),
			field("ratios", 7, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, rep, ""),
			field("child", 8, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".encodetest.Kinds"),
			field("children", 9, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".encodetest.Kinds"),
			field("by_number", 10, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".encodetest.Kinds.ByNumberEntry"),
			field("by_flag", 11, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".encodetest.Kinds.ByFlagEntry"),
			field("by_big", 12, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".encodetest.Kinds.ByBigEntry"),
			field("blobs", 13, descriptorpb.FieldDescriptorProto_TYPE_BYTES, rep, ""),
			field("f64", 14, descriptorpb.FieldDescriptorProto_TYPE_FIXED64, opt, ""),
			field("sf32", 15, descriptorpb.FieldDescriptorProto_TYPE_SFIXED32, opt, ""),
			field("sf64", 16, descriptorpb.FieldDescriptorProto_TYPE_SFIXED64, opt, ""),
			field("s32", 17, descriptorpb.FieldDescriptorProto_TYPE_SINT32, rep, ""),
		},
		NestedType: []*descriptorpb.DescriptorProto{
			entry("ByNumberEntry", descriptorpb.FieldDescriptorProto_TYPE_SINT32, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".encodetest.Kinds"),
			entry("ByFlagEntry", descriptorpb.FieldDescriptorProto_TYPE_BOOL, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
			entry("ByBigEntry", descriptorpb.FieldDescriptorProto_TYPE_UINT64, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, ""),
		},
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("encodetest/kinds.proto"),
		Package:     proto.String("encodetest"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{kinds},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// fill sets m's fields at random: some left unset, lists and maps of 0
// to 3, messages to depth 3, enums sometimes to numbers with no name.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if rng.IntN(4) == 0 || (fd.Message() != nil && depth >= 3) {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(4) {
				l.Append(value(rng, fd, l.NewElement(), depth))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				k := value(rng, fd.MapKey(), protoreflect.Value{}, depth).MapKey()
				mp.Set(k, value(rng, fd.MapValue(), mp.NewValue(), depth))
			}
		default:
			var fresh protoreflect.Value
			if fd.Message() != nil {
				fresh = m.NewField(fd)
			}
			m.Set(fd, value(rng, fd, fresh, depth))
		}
	}
}

// value is a random value of fd's kind; fresh is a new message for a
// message kind.
func value(rng *rand.Rand, fd protoreflect.FieldDescriptor, fresh protoreflect.Value, depth int) protoreflect.Value {
	ints := []int64{0, 1, -1, 42, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, rng.Int64()}
	pick := ints[rng.IntN(len(ints))]
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randomString(rng))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(randomString(rng)))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(pick))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(pick)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(pick))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(pick))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(randomFloat(rng)))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(randomFloat(rng))
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rng.IntN(5) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(1000 + rng.IntN(10)))
		}
		return protoreflect.ValueOfEnum(vals.Get(rng.IntN(vals.Len())).Number())
	}
	fill(rng, fresh.Message(), depth+1)
	return fresh
}

func randomFloat(rng *rand.Rand) float64 {
	floats := []float64{0, math.Copysign(0, -1), 1, -2.5, 0.1, 1e-7, 1e-6, 1e20, 1e21, 123456789.125, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	if rng.IntN(3) == 0 {
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(50)-25))
	}
	return floats[rng.IntN(len(floats))]
}

func randomString(rng *rand.Rand) string {
	parts := []string{"", "web_search", "\"", "\\", "\x00", "\x1f", "\b\f\n\r\t", "\x7f", "<a&b>", "é", "\u2028", "\uFFFD", "日本", "😀", " ", "/"}
	var s string
	for range rng.IntN(4) {
		s += parts[rng.IntN(len(parts))]
	}
	return s
}
