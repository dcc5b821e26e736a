package outbox

import (
	"reflect"
	"testing"
)

func TestGroupByKey(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Key: "a"}, {}, {Key: "b"}, {Key: "a"}, {}, {Key: "b"}, {Key: "c"}}
	want := [][]int{{0, 3}, {1}, {2, 5}, {4}, {6}}
	if got := GroupByKey(msgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("GroupByKey = %v, want %v", got, want)
	}
	if got := GroupByKey(nil); len(got) != 0 {
		t.Fatalf("GroupByKey(nil) = %v", got)
	}
}
