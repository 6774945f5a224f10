package io.sluicemq.peers5;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * A command-line driver over the official Apache RocketMQ Java client 5.x (gRPC), for
 * tests written in Go. Every command prints JSON lines on stdout and ends with
 * {"event":"done",...}; it exits 0 when it did what it was asked, 1 otherwise.
 *
 * <pre>
 * send   --endpoint HOST:PORT --topic T --n N [--type normal|fifo|delay|txn] [--prefix P]
 *        [--groups K] [--delay-ms D] [--txn commit,unknown,rollback] [--check commit|rollback]
 *        [--linger-ms L]
 * simple --endpoint HOST:PORT --topic T --group G --n N [--invisible-ms I] [--batch B]
 *        [--timeout-ms W] [--skip-ack BODY]
 * push   --endpoint HOST:PORT --topic T --group G --n N [--timeout-ms W]
 * </pre>
 *
 * send: message i has body P-i, tag TagA and key K-i; fifo puts it in message group
 * g(i mod K), delay gives it delivery timestamp now + D ms, txn sends it in its own
 * transaction and then ends it as the i-th entry of --txn (cyclic) says (unknown: not
 * ended, left to the broker's check-back, which the checker answers with --check). One
 * line {"event":"sent","i":i,"ok":true,"msgId":...,"body":...,"group":...,"due":ms} per
 * message (ok=false and "error" on failure), one {"event":"check","msgId":...,"body":...}
 * per check-back; with unknown transactions it waits (at most --linger-ms, default
 * 30000) until each was checked.
 *
 * simple: a SimpleConsumer receives (batch B, invisible duration I ms) until N messages
 * were acknowledged or W ms passed; one line {"event":"recv","topic","body","msgId","tag",
 * "keys","group","attempt","ms"} per delivery (ms: the local time of the receive). A
 * message whose body is --skip-ack is not acknowledged on its first attempt (so it comes
 * back when its invisibility ends).
 *
 * push: a PushConsumer consumes until N messages were consumed or W ms passed; a "recv"
 * line per delivery.
 */
public final class Driver5 {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private Driver5() {}

    /** Entry point; see the class comment. */
    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            usage("missing command");
        }
        Map<String, String> a = parse(Arrays.copyOfRange(argv, 1, argv.length));
        int rc;
        switch (argv[0]) {
            case "send":
                rc = send(a);
                break;
            case "simple":
                rc = simple(a);
                break;
            case "push":
                rc = push(a);
                break;
            default:
                usage("unknown command " + argv[0]);
                rc = 2;
        }
        OUT.flush();
        System.exit(rc);
    }

    private static void usage(String why) {
        System.err.println("driver5: " + why + "; usage: driver5 send|simple|push --endpoint HOST:PORT --topic T ...");
        System.exit(2);
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("expected --name value pairs at " + args[i]);
            }
            m.put(args[i].substring(2), args[++i]);
        }
        for (String k : new String[] {"endpoint", "topic"}) {
            if (!m.containsKey(k)) {
                usage("--" + k + " is required");
            }
        }
        return m;
    }

    private static int num(Map<String, String> a, String k, int def) {
        return a.containsKey(k) ? Integer.parseInt(a.get(k)) : def;
    }

    private static ClientConfiguration config(Map<String, String> a) {
        return ClientConfiguration.newBuilder()
                .setEndpoints(a.get("endpoint"))
                .enableSsl(false)
                .setRequestTimeout(Duration.ofSeconds(10))
                .build();
    }

    private static int send(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        String type = a.getOrDefault("type", "normal");
        String prefix = a.getOrDefault("prefix", "m");
        int n = num(a, "n", 1);
        int groups = num(a, "groups", 1);
        long delayMs = num(a, "delay-ms", 0);
        String[] txn = a.getOrDefault("txn", "commit").split(",");
        String check = a.getOrDefault("check", "commit");
        int unknown = 0;
        if ("txn".equals(type)) {
            for (int i = 0; i < n; i++) {
                if ("unknown".equals(txn[i % txn.length])) {
                    unknown++;
                }
            }
        }
        CountDownLatch checked = new CountDownLatch(unknown);
        ProducerBuilder pb = PROVIDER.newProducerBuilder().setClientConfiguration(config(a)).setTopics(topic);
        if ("txn".equals(type)) {
            pb.setTransactionChecker(mv -> {
                line("check", "msgId", mv.getMessageId().toString(), "body", body(mv));
                checked.countDown();
                return "rollback".equals(check) ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
            });
        }
        int failed = 0;
        try (Producer p = pb.build()) {
            for (int i = 0; i < n; i++) {
                String body = prefix + "-" + i;
                MessageBuilder mb = PROVIDER.newMessageBuilder().setTopic(topic).setTag("TagA").setKeys("K-" + i)
                        .setBody(body.getBytes(StandardCharsets.UTF_8));
                String group = "";
                long due = 0;
                if ("fifo".equals(type)) {
                    group = "g" + (i % groups);
                    mb.setMessageGroup(group);
                } else if ("delay".equals(type)) {
                    due = System.currentTimeMillis() + delayMs;
                    mb.setDeliveryTimestamp(due);
                }
                Message msg = mb.build();
                try {
                    SendReceipt r;
                    String end = "";
                    if ("txn".equals(type)) {
                        Transaction tx = p.beginTransaction();
                        r = p.send(msg, tx);
                        end = txn[i % txn.length];
                        if ("commit".equals(end)) {
                            tx.commit();
                        } else if ("rollback".equals(end)) {
                            tx.rollback();
                        }
                    } else {
                        r = p.send(msg);
                    }
                    line("sent", "i", i, "ok", true, "msgId", r.getMessageId().toString(), "body", body,
                            "group", group, "due", due, "txn", end);
                } catch (ClientException e) {
                    failed++;
                    line("sent", "i", i, "ok", false, "body", body, "error", e.toString());
                }
            }
            if (unknown > 0 && !checked.await(num(a, "linger-ms", 30000), TimeUnit.MILLISECONDS)) {
                line("done", "failed", failed, "unchecked", checked.getCount());
                return 1;
            }
        }
        line("done", "failed", failed);
        return failed == 0 ? 0 : 1;
    }

    private static int simple(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        int n = num(a, "n", 1);
        int batch = num(a, "batch", 16);
        Duration invisible = Duration.ofMillis(num(a, "invisible-ms", 10000));
        long deadline = System.currentTimeMillis() + num(a, "timeout-ms", 60000);
        String skipAck = a.get("skip-ack");
        int acked = 0;
        try (SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(a))
                .setConsumerGroup(a.get("group")).setAwaitDuration(Duration.ofSeconds(2))
                .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL)).build()) {
            while (acked < n && System.currentTimeMillis() < deadline) {
                List<MessageView> got;
                try {
                    got = c.receive(batch, invisible);
                } catch (ClientException e) {
                    // MESSAGE_NOT_FOUND after the long polling: nothing yet.
                    continue;
                }
                long now = System.currentTimeMillis();
                for (MessageView mv : got) {
                    recv(mv, now);
                    if (body(mv).equals(skipAck) && mv.getDeliveryAttempt() == 1) {
                        continue;
                    }
                    c.ack(mv);
                    acked++;
                }
            }
        }
        line("done", "acked", acked);
        return acked >= n ? 0 : 1;
    }

    private static int push(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        int n = num(a, "n", 1);
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(n);
        AtomicInteger deliveries = new AtomicInteger();
        try (PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config(a))
                .setConsumerGroup(a.get("group"))
                .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .setMessageListener(mv -> {
                    recv(mv, System.currentTimeMillis());
                    deliveries.incrementAndGet();
                    if (consumed.add(mv.getMessageId().toString())) {
                        all.countDown();
                    }
                    return ConsumeResult.SUCCESS;
                }).build()) {
            boolean ok = all.await(num(a, "timeout-ms", 60000), TimeUnit.MILLISECONDS);
            line("done", "consumed", consumed.size(), "deliveries", deliveries.get());
            return ok ? 0 : 1;
        }
    }

    private static String body(MessageView mv) {
        return StandardCharsets.UTF_8.decode(mv.getBody().duplicate()).toString();
    }

    private static void recv(MessageView mv, long ms) {
        line("recv", "topic", mv.getTopic(), "body", body(mv), "msgId", mv.getMessageId().toString(),
                "tag", mv.getTag().orElse(""), "keys", String.join(" ", mv.getKeys()),
                "group", mv.getMessageGroup().orElse(""), "attempt", mv.getDeliveryAttempt(), "ms", ms);
    }

    /** Prints {"event":event, k1:v1, ...}: strings quoted and escaped, numbers and booleans as they are. */
    private static synchronized void line(String event, Object... kv) {
        StringBuilder b = new StringBuilder("{\"event\":").append(quote(event));
        for (int i = 0; i + 1 < kv.length; i += 2) {
            b.append(',').append(quote((String) kv[i])).append(':');
            Object v = kv[i + 1];
            b.append(v instanceof Number || v instanceof Boolean ? v.toString() : quote(String.valueOf(v)));
        }
        OUT.println(b.append('}'));
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
