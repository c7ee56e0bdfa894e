package state

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// Every field of State survives the flat file layout: one added to State
// but not to the file would be lost at the next start (a failed restart
// would then read healthy).
func TestEveryFieldRoundTrips(t *testing.T) {
	var s State
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		case reflect.String:
			n++
			v.SetString(fmt.Sprintf("value %d", n))
		case reflect.Int64:
			n++
			v.SetInt(int64(n))
		default:
			t.Fatalf("a %s field: extend this test", v.Kind())
		}
	}
	fill(reflect.ValueOf(&s).Elem())
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip lost fields:\n%+v\n%+v (%v)", s, back, err)
	}
}
