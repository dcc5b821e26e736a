package outboxmqtt

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/store/memory"
)

// The lazy store gives back what paho's memory store would: the packet's
// bytes, parsed by paho into the same PUBLISH, in Put order.
func TestLazyStore(t *testing.T) {
	t.Parallel()
	ls := &lazyStore{data: map[uint16]lazyPacket{}}
	pub := func(id uint16, payload string) *packets.Publish {
		return &packets.Publish{PacketID: id, QoS: 1, Topic: "t/1", Payload: []byte(payload),
			Properties: &packets.Properties{ContentType: "application/json",
				User: []packets.User{{Key: "id", Value: payload}}}}
	}
	for _, id := range []uint16{7, 3, 9} {
		if err := ls.Put(id, packets.PUBLISH, pub(id, `"m`+string(rune('0'+id))+`"`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ls.Delete(3); err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(3); err == nil {
		t.Error("deleting a packet twice: no error")
	}
	ids, err := ls.List()
	if err != nil || !slices.Equal(ids, []uint16{7, 9}) {
		t.Fatalf("List = %v, %v; want [7 9] (Put order, without the deleted one)", ids, err)
	}
	r, err := ls.Get(9)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := packets.ReadPacket(r)
	if err != nil {
		t.Fatal(err)
	}
	got := cp.Content.(*packets.Publish)
	if got.PacketID != 9 || got.Topic != "t/1" || !bytes.Equal(got.Payload, []byte(`"m9"`)) ||
		got.Properties.ContentType != "application/json" || len(got.Properties.User) != 1 || got.Properties.User[0].Value != `"m9"` {
		t.Errorf("Get(9) parsed to %+v", got)
	}
	if _, err := ls.Get(3); !errors.Is(err, memory.ErrNotInStore) {
		t.Errorf("Get of a deleted packet: %v, want memory.ErrNotInStore", err)
	}
	if err := ls.Reset(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := ls.List(); len(ids) != 0 {
		t.Errorf("List after Reset = %v", ids)
	}
}
