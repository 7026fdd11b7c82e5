package breaker

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// EnumName is how breakerd names an API enum value wherever it prints one
// (states, event kinds, decisions and outcomes in logs, hook payloads,
// metric labels and breakerctl): the value's name in lower case without
// its enum's prefix, which is the name of the enum's zero value less
// UNSPECIFIED. STATE_HALF_OPEN is "half_open", EVENT_KIND_RUN_STARTED
// "run_started", DECISION_DENIED_OPEN "denied_open"; a number this build
// does not know is its decimal.
func EnumName(e protoreflect.Enum) string {
	d := e.Descriptor()
	v := d.Values().ByNumber(e.Number())
	if v == nil {
		return strconv.Itoa(int(e.Number()))
	}
	prefix := strings.TrimSuffix(string(d.Values().ByNumber(0).Name()), "UNSPECIFIED")
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
}
