package io.sluicemq.peers;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * A command-line driver over the Apache RocketMQ Java client, for tests written in Go.
 *
 * <pre>
 * java -cp driver.jar:lib/* io.sluicemq.peers.Driver produce --namesrv ADDR [--group G] [--mode sync|async|oneway|batch|txn]
 *      [--timeout MS] [--linger MS]
 * java -cp driver.jar:lib/* io.sluicemq.peers.Driver consume --namesrv ADDR --group G --topic T [--filter tag|sql] [--expr E]
 *      [--orderly] [--from first|last] [--later-keys k1,k2] [--later-times N] [--max-reconsume N] [--threads N]
 * java -cp driver.jar:lib/* io.sluicemq.peers.Driver pull --namesrv ADDR --group G --topic T [--expr E] [--from first|last]
 * </pre>
 *
 * Every command takes --access-key K --secret-key S to sign its requests (RocketMQ plain
 * ACL, AclClientRPCHook).
 *
 * produce reads one JSON object a line from stdin, each a send: topic, tags, keys (blank
 * separated), body, props (object), delay (level), queueId (send to that queue of the
 * route), mode (overrides --mode), batch (array of messages for mode batch), txn
 * (commit|rollback|unknown: the local transaction's answer) and check (commit|rollback|
 * unknown: the answer to a check-back). For each it prints one JSON line {"event":"sent",
 * "i":n,...} with ok, status, msgId, offsetMsgId, queueId, queueOffset, or ok=false with
 * error and code (the broker's response code when the client reports one). A check-back
 * prints {"event":"check",...}. At end of input it waits for outstanding async sends,
 * then --linger ms (to answer check-backs), shuts down and prints {"event":"done"}.
 *
 * consume prints {"event":"started"} once the push consumer runs, then one line
 * {"event":"msg",...} per delivery (topic, queueId, queueOffset, msgId, keys, tags,
 * reconsumeTimes, body, props (all the message's properties), result). Messages whose keys are in --later-keys are answered
 * RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT) while their reconsumeTimes is
 * below --later-times (-1: always). It stops when stdin closes and prints
 * {"event":"done"}.
 *
 * pull runs a lite pull consumer (subscription, offsets committed automatically) and
 * prints the same "msg" lines (result SUCCESS) for what its polls return, until stdin
 * closes.
 */
public final class Driver {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    private Driver() {}

    /** Entry point; see the class comment. */
    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            usage("missing command");
        }
        Map<String, String> a = parse(Arrays.copyOfRange(argv, 1, argv.length));
        int rc;
        switch (argv[0]) {
            case "produce":
                rc = produce(a);
                break;
            case "consume":
                rc = consume(a);
                break;
            case "pull":
                rc = pull(a);
                break;
            default:
                usage("unknown command " + argv[0]);
                rc = 2;
        }
        System.exit(rc);
    }

    private static void usage(String why) {
        System.err.println("driver: " + why + "; usage: driver produce|consume|pull --namesrv ADDR ...");
        System.exit(2);
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                usage("unexpected argument " + args[i]);
            }
            String k = args[i].substring(2);
            if (i + 1 < args.length && !args[i + 1].startsWith("--")) {
                m.put(k, args[++i]);
            } else {
                m.put(k, "true");
            }
        }
        if (!m.containsKey("namesrv")) {
            usage("--namesrv is required");
        }
        return m;
    }

    /** The ACL signing hook of --access-key and --secret-key, or null. */
    private static RPCHook aclHook(Map<String, String> a) {
        if (!a.containsKey("access-key")) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(a.get("access-key"), a.get("secret-key")));
    }

    static synchronized void emit(JSONObject o) {
        OUT.println(o.toJSONString());
    }

    private static JSONObject event(String name) {
        JSONObject o = new JSONObject(true);
        o.put("event", name);
        return o;
    }

    // ---- produce ----------------------------------------------------------------------

    private static final Map<String, String> CHECK_ANSWERS = new ConcurrentHashMap<>();

    private static LocalTransactionState txnState(String s) {
        if (s == null) {
            return LocalTransactionState.COMMIT_MESSAGE;
        }
        switch (s) {
            case "commit":
                return LocalTransactionState.COMMIT_MESSAGE;
            case "rollback":
                return LocalTransactionState.ROLLBACK_MESSAGE;
            default:
                return LocalTransactionState.UNKNOW;
        }
    }

    private static Message message(JSONObject j) {
        Message m = new Message();
        m.setTopic(j.getString("topic"));
        String body = j.getString("body");
        m.setBody(body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8));
        if (j.containsKey("tags")) {
            m.setTags(j.getString("tags"));
        }
        if (j.containsKey("keys")) {
            m.setKeys(Arrays.asList(j.getString("keys").split(" ")));
        }
        if (j.containsKey("delay")) {
            m.setDelayTimeLevel(j.getIntValue("delay"));
        }
        JSONObject props = j.getJSONObject("props");
        if (props != null) {
            for (String k : props.keySet()) {
                m.putUserProperty(k, props.getString(k));
            }
        }
        return m;
    }

    private static JSONObject sent(int i, SendResult r) {
        JSONObject o = event("sent");
        o.put("i", i);
        o.put("ok", true);
        o.put("status", r.getSendStatus().name());
        o.put("msgId", r.getMsgId());
        o.put("offsetMsgId", r.getOffsetMsgId());
        o.put("queueId", r.getMessageQueue() == null ? -1 : r.getMessageQueue().getQueueId());
        o.put("broker", r.getMessageQueue() == null ? "" : r.getMessageQueue().getBrokerName());
        o.put("queueOffset", r.getQueueOffset());
        if (r instanceof TransactionSendResult) {
            LocalTransactionState s = ((TransactionSendResult) r).getLocalTransactionState();
            o.put("txnState", s == null ? "" : s.name());
            o.put("transactionId", r.getTransactionId());
        }
        return o;
    }

    private static JSONObject failed(int i, Throwable e) {
        JSONObject o = event("sent");
        o.put("i", i);
        o.put("ok", false);
        o.put("error", String.valueOf(e.getMessage()));
        o.put("exception", e.getClass().getSimpleName());
        int code = -1;
        if (e instanceof MQClientException) {
            code = ((MQClientException) e).getResponseCode();
        } else if (e instanceof MQBrokerException) {
            code = ((MQBrokerException) e).getResponseCode();
        }
        o.put("code", code);
        return o;
    }

    private static int produce(Map<String, String> a) throws Exception {
        String mode = a.getOrDefault("mode", "sync");
        String group = a.getOrDefault("group", "driver-producer-" + ProcessHandle.current().pid());
        DefaultMQProducer p;
        if (mode.equals("txn")) {
            TransactionMQProducer tp = new TransactionMQProducer(null, group, aclHook(a));
            tp.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    return txnState((String) arg);
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    String ans = CHECK_ANSWERS.getOrDefault(msg.getKeys() == null ? "" : msg.getKeys(), "commit");
                    JSONObject o = event("check");
                    o.put("keys", msg.getKeys());
                    o.put("msgId", msg.getMsgId());
                    o.put("transactionId", msg.getTransactionId());
                    o.put("topic", msg.getTopic());
                    o.put("answer", ans);
                    emit(o);
                    return txnState(ans);
                }
            });
            p = tp;
        } else {
            p = new DefaultMQProducer(group, aclHook(a));
        }
        connect(p, a);
        p.setSendMsgTimeout(Integer.parseInt(a.getOrDefault("timeout", "5000")));
        p.setRetryTimesWhenSendFailed(Integer.parseInt(a.getOrDefault("retries", "2")));
        p.start();
        emit(event("started"));
        AtomicInteger pending = new AtomicInteger();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int i = 0;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            final int n = i++;
            JSONObject j = JSON.parseObject(line);
            String m = j.getString("mode") != null ? j.getString("mode") : mode;
            try {
                switch (m) {
                    case "sync": {
                        Message msg = message(j);
                        if (j.containsKey("queueId")) {
                            int q = j.getIntValue("queueId");
                            emit(sent(n, p.send(msg, (mqs, mm, arg) -> pick(mqs, q), null)));
                        } else {
                            emit(sent(n, p.send(msg)));
                        }
                        break;
                    }
                    case "async":
                        pending.incrementAndGet();
                        p.send(message(j), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                emit(sent(n, r));
                                pending.decrementAndGet();
                            }

                            @Override
                            public void onException(Throwable e) {
                                emit(failed(n, e));
                                pending.decrementAndGet();
                            }
                        });
                        break;
                    case "oneway": {
                        p.sendOneway(message(j));
                        JSONObject o = event("sent");
                        o.put("i", n);
                        o.put("ok", true);
                        emit(o);
                        break;
                    }
                    case "batch": {
                        JSONArray arr = j.getJSONArray("batch");
                        List<Message> msgs = new ArrayList<>();
                        for (int k = 0; k < arr.size(); k++) {
                            msgs.add(message(arr.getJSONObject(k)));
                        }
                        emit(sent(n, p.send(msgs)));
                        break;
                    }
                    case "txn": {
                        if (!(p instanceof TransactionMQProducer)) {
                            throw new IllegalArgumentException("mode txn needs --mode txn");
                        }
                        Message msg = message(j);
                        CHECK_ANSWERS.put(msg.getKeys() == null ? "" : msg.getKeys(), j.getString("check") == null ? "commit" : j.getString("check"));
                        emit(sent(n, ((TransactionMQProducer) p).sendMessageInTransaction(msg, j.getString("txn"))));
                        break;
                    }
                    default:
                        throw new IllegalArgumentException("unknown mode " + m);
                }
            } catch (Exception e) {
                emit(failed(n, e));
            }
        }
        long deadline = System.currentTimeMillis() + 30000;
        while (pending.get() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(10);
        }
        long linger = Long.parseLong(a.getOrDefault("linger", "0"));
        if (linger > 0) {
            Thread.sleep(linger);
        }
        p.shutdown();
        emit(event("done"));
        return 0;
    }

    private static MessageQueue pick(List<MessageQueue> mqs, int queueId) {
        for (MessageQueue q : mqs) {
            if (q.getQueueId() == queueId) {
                return q;
            }
        }
        return mqs.get(queueId % mqs.size());
    }

    // ---- consume ----------------------------------------------------------------------

    private static JSONObject delivery(MessageExt m, String result) {
        JSONObject o = event("msg");
        o.put("topic", m.getTopic());
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("msgId", m.getMsgId());
        o.put("keys", m.getKeys() == null ? "" : m.getKeys());
        o.put("tags", m.getTags() == null ? "" : m.getTags());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        o.put("props", m.getProperties());
        o.put("result", result);
        return o;
    }

    /** connect points a client at the name server of "namesrv" (no VIP channel, one instance name per driver process, routes polled every second). */
    private static void connect(ClientConfig c, Map<String, String> a) {
        c.setNamesrvAddr(a.get("namesrv"));
        c.setVipChannelEnabled(false);
        c.setInstanceName("driver-" + ProcessHandle.current().pid());
        c.setPollNameServerInterval(1000);
    }

    /** fromWhere is where a new consumer group starts: "from"=last the last offset, else the first. */
    private static ConsumeFromWhere fromWhere(Map<String, String> a) {
        return "last".equals(a.get("from")) ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET;
    }

    private static int consume(Map<String, String> a) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a.getOrDefault("group", "driver-consumer"), aclHook(a),
                new AllocateMessageQueueAveragely());
        connect(c, a);
        c.setHeartbeatBrokerInterval(1000);
        c.setPersistConsumerOffsetInterval(1000);
        c.setConsumeFromWhere(fromWhere(a));
        c.setSuspendCurrentQueueTimeMillis(200);
        if (a.containsKey("max-reconsume")) {
            c.setMaxReconsumeTimes(Integer.parseInt(a.get("max-reconsume")));
        }
        int threads = Integer.parseInt(a.getOrDefault("threads", "4"));
        c.setConsumeThreadMin(threads);
        c.setConsumeThreadMax(threads);
        String topic = a.get("topic");
        String expr = a.getOrDefault("expr", "*");
        if ("sql".equals(a.get("filter"))) {
            c.subscribe(topic, MessageSelector.bySql(expr));
        } else {
            c.subscribe(topic, expr);
        }
        Set<String> later = new HashSet<>();
        if (a.containsKey("later-keys")) {
            later.addAll(Arrays.asList(a.get("later-keys").split(",")));
        }
        int laterTimes = Integer.parseInt(a.getOrDefault("later-times", "-1"));
        java.util.function.Predicate<MessageExt> retry = m -> m.getKeys() != null && later.contains(m.getKeys())
                && (laterTimes < 0 || m.getReconsumeTimes() < laterTimes);
        if (a.containsKey("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (retry.test(m)) {
                        emit(delivery(m, "SUSPEND"));
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                    emit(delivery(m, "SUCCESS"));
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (retry.test(m)) {
                        emit(delivery(m, "LATER"));
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    emit(delivery(m, "SUCCESS"));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        emit(event("started"));
        stdinClosed().await();
        c.shutdown();
        emit(event("done"));
        return 0;
    }

    /** A latch counted down when stdin reaches its end (the input is only a stop signal). */
    private static CountDownLatch stdinClosed() {
        CountDownLatch eof = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // input is only a stop signal
                }
            } catch (Exception ignored) {
                // closed
            }
            eof.countDown();
        });
        t.setDaemon(true);
        t.start();
        return eof;
    }

    // ---- pull -------------------------------------------------------------------------

    private static int pull(Map<String, String> a) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a.getOrDefault("group", "driver-pull"), aclHook(a));
        connect(c, a);
        c.setHeartbeatBrokerInterval(1000);
        c.setAutoCommitIntervalMillis(1000);
        c.setConsumeFromWhere(fromWhere(a));
        c.subscribe(a.get("topic"), a.getOrDefault("expr", "*"));
        c.start();
        emit(event("started"));
        CountDownLatch eof = stdinClosed();
        while (eof.getCount() > 0) {
            for (MessageExt m : c.poll(200)) {
                emit(delivery(m, "SUCCESS"));
            }
        }
        c.shutdown();
        emit(event("done"));
        return 0;
    }

}
