package outboxkafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
)

// TestClassify: a Kafka error code that reaches a record is a refusal of the
// message unless it says the cluster cannot take writes, or the brokers
// reject the client; Kafka's retriable flag does not decide.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{kerr.CorruptMessage, false}, // retriable for Kafka, never retried by franz-go
		{kerr.InvalidRecord, false},
		{kerr.MessageTooLarge, false},
		{kerr.PolicyViolation, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.UnknownServerError, false},
		{fmt.Errorf("wrapped: %w", kerr.CorruptMessage), false},
		{kerr.NotEnoughReplicas, true},
		{kerr.NotEnoughReplicasAfterAppend, true},
		{kerr.LeaderNotAvailable, true},
		{kerr.NotLeaderForPartition, true},
		{kerr.BrokerNotAvailable, true},
		{kerr.ReplicaNotAvailable, true},
		{kerr.RequestTimedOut, true},
		{kerr.NetworkException, true},
		{kerr.KafkaStorageError, true},
		{kerr.SaslAuthenticationFailed, true},
		{kerr.ClusterAuthorizationFailed, true},
		{context.DeadlineExceeded, true},
		{kgo.ErrRecordRetries, true},
	} {
		got := classify(tc.err, "t", nil)
		if outbox.IsUnavailable(got) != tc.unavailable {
			t.Errorf("classify(%v): unavailable = %v, want %v (%v)", tc.err, !tc.unavailable, tc.unavailable, got)
		}
	}
}
