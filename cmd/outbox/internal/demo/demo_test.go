package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// seedOutput is the classic telling of the transfer (24.6 本地消息表), verbatim.
const seedOutput = `本地事务提交完成（业务 + 消息一起落库）
账户：alice=900 bob=100
消息 m-1 status=0 retries=0
下游已处理：[]

— relay 开始扫描，前两次 MQ 超时
— 第 1 轮 relay
✗ m-1 投递失败（第 1 次）：MQ 超时
   （无新消息）
— 第 2 轮 relay
✗ m-1 投递失败（第 2 次）：MQ 超时
   （无新消息）
— 第 3 轮 relay
✓ m-1 投递成功
— 第 4 轮 relay
   （无新消息）

— 消费：MQ 至少一次投递，同一条消息到达两次
→ 消费 m-1：alice→bob 100 元（发积分 / 发通知）
↺ 消费 m-1：重复消息，丢弃

账户：alice=900 bob=100
消息 m-1 status=1 retries=2
下游已处理：[alice→bob 100 元]`

func TestDemoMatchesSeed(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := Run(context.Background(), nil, &out, &errb); err != nil {
		t.Fatalf("demo: %v (%s)", err, errb.String())
	}
	if got := strings.TrimRight(out.String(), "\n"); got != seedOutput {
		t.Fatalf("demo output differs from the classic telling:\n--- got\n%s\n--- want\n%s", got, seedOutput)
	}
}

func TestDemoEnglishKeepsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"--lang", "en", "--dir", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"accounts: alice=900 bob=100", "message m-1 status=1 retries=2", "applied downstream: [alice→bob 100]", "duplicate, discarded", dir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("English demo lacks %q:\n%s", want, out.String())
		}
	}
	// Run twice in the same directory: it starts afresh.
	out.Reset()
	if err := Run(context.Background(), []string{"--lang", "en", "--dir", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "message m-1 status=1 retries=2") {
		t.Fatalf("second run in the same dir:\n%s", out.String())
	}
	if err := Run(context.Background(), []string{"--lang", "fr"}, &out, &out); err == nil {
		t.Fatal("--lang fr accepted")
	}
}

// The seed's scenario over a real broker: NATS JetStream embedded in the
// process. The narrative is the seed's, with two lines more (the broker, and
// the lost ack that makes JetStream deliver the message again), and the
// final state is the seed's.
func TestDemoOverEmbeddedNATS(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"--broker", "nats"}, &out, &errb); err != nil {
		t.Fatalf("demo --broker nats: %v (%s)", err, errb.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "MQ：内嵌 NATS JetStream（nats://127.0.0.1:") {
		t.Fatalf("first line %q does not name the embedded broker", lines[0])
	}
	var kept []string
	for _, l := range lines[1:] {
		if !strings.Contains(l, "ack 丢失") {
			kept = append(kept, l)
		}
	}
	if got := strings.Join(kept, "\n"); got != seedOutput {
		t.Fatalf("demo over NATS, without its two extra lines, differs from the classic telling:\n--- got\n%s\n--- want\n%s", got, seedOutput)
	}
	if err := Run(context.Background(), []string{"--broker", "kafka"}, &out, &errb); err == nil {
		t.Fatal("--broker kafka accepted")
	}
}

// The same over the machine's shared NATS server (a nats:// URL).
func TestDemoOverNATSURL(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"--broker", "nats://127.0.0.1:4222", "--lang", "en"}, &out, &errb); err != nil {
		t.Fatalf("demo --broker nats://127.0.0.1:4222 (NATS with JetStream must run here): %v (%s)", err, errb.String())
	}
	for _, want := range []string{"message m-1 status=1 retries=2", "applied downstream: [alice→bob 100]", "duplicate, discarded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
