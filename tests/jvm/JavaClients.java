// Kafka's own Java clients against a broker: one JVM runs every step and prints one
// "STEP <name> OK|FAIL <detail>" line per step, for tests/integration/test_java_clients.py.
// Compiled by the test with `javac -cp '<kafka jars>/*'`; arguments: bootstrap, a unique
// prefix for topic, group and transactional-id names.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class JavaClients {
    interface Step { String run() throws Exception; }

    static int failures = 0;

    static void step(String name, Step body) {
        try {
            String detail = body.run();
            System.out.println("STEP " + name + " OK " + (detail == null ? "" : detail));
        } catch (Throwable e) {
            failures++;
            Throwable root = e;
            while (root.getCause() != null && root != root.getCause()) root = root.getCause();
            System.out.println("STEP " + name + " FAIL " + root.getClass().getName() + ": "
                + String.valueOf(root.getMessage()).replace('\n', ' '));
        }
        System.out.flush();
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new IllegalStateException(what);
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("default.api.timeout.ms", "20000");
        p.put("request.timeout.ms", "10000");
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("max.block.ms", "20000");
        p.put("delivery.timeout.ms", "20000");
        p.put("request.timeout.ms", "10000");
        if (txnId != null) {
            p.put("transactional.id", txnId);
            p.put("transaction.timeout.ms", "20000");
        }
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group, Map<String, String> extra) {
        Properties p = common(bootstrap);
        p.put("group.id", group);
        p.put("isolation.level", "read_committed");
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        if (!"consumer".equals(extra.get("group.protocol"))) p.put("session.timeout.ms", "10000");
        p.putAll(extra);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static List<ConsumerRecord<String, String>> pollUntil(KafkaConsumer<String, String> c, int n, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    static long offset(Admin admin, TopicPartition tp, OffsetSpec spec, IsolationLevel level) throws Exception {
        return admin.listOffsets(Map.of(tp, spec), new ListOffsetsOptions(level))
            .partitionResult(tp).get(20, TimeUnit.SECONDS).offset();
    }

    // Consume n records of `in`, write them upper-cased to out-1 and commit their offsets
    // in one transaction with the consumer's groupMetadata() (KIP-447; under KIP-848 it
    // carries the member epoch).
    static void consumeTransformProduce(KafkaConsumer<String, String> c, KafkaProducer<String, String> p,
                                        String in, String out, int n) throws Exception {
        p.initTransactions();
        c.subscribe(List.of(in));
        List<ConsumerRecord<String, String>> got = pollUntil(c, n, 20000);
        check(got.size() == n, "consumed " + got.size());
        p.beginTransaction();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<String, String> r : got) {
            p.send(new ProducerRecord<>(out, 1, r.key(), r.value().toUpperCase()));
            offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        }
        p.sendOffsetsToTransaction(offsets, c.groupMetadata());
        p.commitTransaction();
    }

    // The group's committed offset of tp. It becomes visible with the marker in
    // __consumer_offsets, which is written after commitTransaction returns.
    static long committedOffset(Admin admin, String group, TopicPartition tp) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> committed = Map.of();
        long deadline = System.currentTimeMillis() + 15000;
        while (System.currentTimeMillis() < deadline) {
            committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            if (committed.get(tp) != null) break;
            Thread.sleep(100);
        }
        check(committed.get(tp) != null, "committed " + committed);
        return committed.get(tp).offset();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        String in = prefix + "-in", out = prefix + "-out";
        TopicPartition in0 = new TopicPartition(in, 0), out0 = new TopicPartition(out, 0);
        ConfigResource inResource = new ConfigResource(ConfigResource.Type.TOPIC, in);

        try (Admin admin = Admin.create(common(bootstrap))) {
            step("admin.createTopics", () -> {
                admin.createTopics(List.of(new NewTopic(in, 3, (short) 1), new NewTopic(out, 3, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
                return in + "," + out;
            });
            step("admin.describeTopics", () -> {
                TopicDescription d = admin.describeTopics(List.of(in)).allTopicNames()
                    .get(20, TimeUnit.SECONDS).get(in);
                check(d.partitions().size() == 3, "partitions " + d.partitions());
                for (TopicPartitionInfo p : d.partitions()) check(p.leader() != null, "no leader " + p);
                return "partitions=" + d.partitions().size() + " id=" + d.topicId();
            });
            step("admin.describeConfigs", () -> {
                Config c = admin.describeConfigs(List.of(inResource), new DescribeConfigsOptions().includeSynonyms(true))
                    .all().get(20, TimeUnit.SECONDS).get(inResource);
                ConfigEntry policy = c.get("cleanup.policy");
                check(policy != null && policy.value().equals("delete"), "cleanup.policy " + policy);
                check(policy.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG, "source " + policy.source());
                check(!policy.synonyms().isEmpty(), "no synonyms for cleanup.policy");
                return "cleanup.policy synonyms=" + policy.synonyms();
            });
            step("admin.incrementalAlterConfigs", () -> {
                admin.incrementalAlterConfigs(Map.of(inResource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET))))
                    .all().get(20, TimeUnit.SECONDS);
                // Kafka's controller applies the change: its broker shows it a moment later.
                ConfigEntry e = null;
                long deadline = System.currentTimeMillis() + 15000;
                while (System.currentTimeMillis() < deadline) {
                    e = admin.describeConfigs(List.of(inResource)).all().get(20, TimeUnit.SECONDS)
                        .get(inResource).get("retention.ms");
                    if (e.value().equals("3600000")) break;
                    Thread.sleep(100);
                }
                check(e.value().equals("3600000"), "retention.ms " + e);
                check(e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, "source " + e.source());
                return "retention.ms=" + e.value();
            });

            step("producer.idempotent", () -> {
                try (KafkaProducer<String, String> p = producer(bootstrap, null)) {
                    long last = -1;
                    for (int i = 0; i < 10; i++) {
                        RecordMetadata m = p.send(new ProducerRecord<>(in, 0, "k" + i, "v" + i)).get(20, TimeUnit.SECONDS);
                        check(m.offset() == last + 1, "offset " + m.offset() + " after " + last);
                        last = m.offset();
                    }
                    return "last offset " + last;
                }
            });
            step("producer.transactional", () -> {
                try (KafkaProducer<String, String> p = producer(bootstrap, prefix + "-tx")) {
                    p.initTransactions();
                    p.beginTransaction();
                    for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(out, 0, "a" + i, "aborted" + i));
                    p.flush();
                    p.abortTransaction();
                    p.beginTransaction();
                    for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(out, 0, "c" + i, "committed" + i));
                    p.commitTransaction();
                    return null;
                }
            });
            step("consumer.readCommitted", () -> {
                try (KafkaConsumer<String, String> c = consumer(bootstrap, prefix + "-rc", Map.of())) {
                    c.subscribe(List.of(out));
                    List<ConsumerRecord<String, String>> got = pollUntil(c, 5, 20000);
                    List<String> values = new ArrayList<>();
                    for (ConsumerRecord<String, String> r : got) values.add(r.value());
                    check(values.equals(List.of("committed0", "committed1", "committed2", "committed3", "committed4")),
                        "values " + values);
                    check(pollUntil(c, 1, 1000).isEmpty(), "more records than committed");
                    c.commitSync();
                    return "values=" + values.size();
                }
            });
            step("producer.sendOffsetsToTransaction", () -> {
                String group = prefix + "-ctp";
                try (KafkaConsumer<String, String> c = consumer(bootstrap, group, Map.of());
                     KafkaProducer<String, String> p = producer(bootstrap, prefix + "-ctp-tx")) {
                    consumeTransformProduce(c, p, in, out, 10);
                }
                long committed = committedOffset(admin, group, in0);
                check(committed == 10, "committed " + committed);
                return "committed " + committed;
            });

            // An open transaction on out-0: the admin views of KIP-664 and the LSO.
            KafkaProducer<String, String> open = producer(bootstrap, prefix + "-open");
            try {
                step("admin.listOffsets.readCommitted", () -> {
                    open.initTransactions();
                    open.beginTransaction();
                    open.send(new ProducerRecord<>(out, 0, "o", "open")).get(20, TimeUnit.SECONDS);
                    long hw = offset(admin, out0, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED);
                    long lso = offset(admin, out0, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED);
                    check(lso < hw, "lso " + lso + " hw " + hw);
                    return "lso=" + lso + " hw=" + hw;
                });
                step("admin.listTransactions", () -> {
                    Collection<TransactionListing> all = admin.listTransactions().all().get(20, TimeUnit.SECONDS);
                    for (TransactionListing t : all)
                        if (t.transactionalId().equals(prefix + "-open"))
                            return "state=" + t.state();
                    throw new IllegalStateException("not listed: " + all);
                });
                step("admin.describeTransactions", () -> {
                    TransactionDescription d = admin.describeTransactions(List.of(prefix + "-open"))
                        .description(prefix + "-open").get(20, TimeUnit.SECONDS);
                    check(d.state() == TransactionState.ONGOING, "state " + d.state());
                    check(d.topicPartitions().contains(out0), "partitions " + d.topicPartitions());
                    return "state=" + d.state() + " partitions=" + d.topicPartitions();
                });
                step("admin.describeProducers+abortTransaction", () -> {
                    List<ProducerState> states = admin.describeProducers(List.of(out0)).partitionResult(out0)
                        .get(20, TimeUnit.SECONDS).activeProducers();
                    ProducerState hanging = null;
                    for (ProducerState s : states) if (s.currentTransactionStartOffset().isPresent()) hanging = s;
                    check(hanging != null, "no open transaction in " + states);
                    admin.abortTransaction(new AbortTransactionSpec(out0, hanging.producerId(),
                        (short) hanging.producerEpoch(), hanging.coordinatorEpoch().orElse(-1)))
                        .all().get(20, TimeUnit.SECONDS);
                    long hw = offset(admin, out0, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED);
                    long lso = offset(admin, out0, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED);
                    check(lso == hw, "after abort lso " + lso + " hw " + hw);
                    return "aborted pid " + hanging.producerId() + ", lso=hw=" + hw;
                });
            } finally {
                open.close(Duration.ofSeconds(5));
            }
            step("admin.fenceProducers", () -> {
                admin.fenceProducers(List.of(prefix + "-tx")).all().get(20, TimeUnit.SECONDS);
                return null;
            });
            step("admin.deleteRecords", () -> {
                DeletedRecords d = admin.deleteRecords(Map.of(in0, RecordsToDelete.beforeOffset(4)))
                    .lowWatermarks().get(in0).get(20, TimeUnit.SECONDS);
                check(d.lowWatermark() == 4, "low watermark " + d.lowWatermark());
                long earliest = offset(admin, in0, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED);
                check(earliest == 4, "earliest " + earliest);
                return "low watermark 4";
            });
            step("admin.listGroups", () -> {
                Collection<GroupListing> groups = admin.listGroups().all().get(20, TimeUnit.SECONDS);
                for (GroupListing g : groups)
                    if (g.groupId().equals(prefix + "-ctp")) return "type=" + g.type() + " state=" + g.groupState();
                throw new IllegalStateException("not listed: " + groups);
            });
            step("admin.describeConsumerGroups", () -> {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(prefix + "-ctp"))
                    .describedGroups().get(prefix + "-ctp").get(20, TimeUnit.SECONDS);
                return "state=" + d.groupState() + " type=" + d.type();
            });
            // KIP-848: the consumer protocol (ConsumerGroupHeartbeat, key 68).
            step("consumer.groupProtocolConsumer", () -> {
                try (KafkaConsumer<String, String> c = consumer(bootstrap, prefix + "-848",
                        Map.of("group.protocol", "consumer"))) {
                    c.subscribe(List.of(out));
                    // out-0 holds 5 committed records, out-1 the 10 of consume-transform-produce
                    List<ConsumerRecord<String, String>> got = pollUntil(c, 15, 15000);
                    check(got.size() == 15, "consumed " + got.size());
                    return "consumed " + got.size();
                }
            });
            // KIP-848 + exactly-once: the offsets go with the member epoch in groupMetadata().
            step("producer.sendOffsetsToTransaction.groupProtocolConsumer", () -> {
                String group = prefix + "-848-ctp";
                try (KafkaConsumer<String, String> c = consumer(bootstrap, group,
                        Map.of("group.protocol", "consumer"));
                     KafkaProducer<String, String> p = producer(bootstrap, prefix + "-848-tx")) {
                    // in-0 holds offsets 4-9 (admin.deleteRecords moved its start to 4)
                    consumeTransformProduce(c, p, in, out, 6);
                    check(c.groupMetadata().generationId() > 0, "member epoch " + c.groupMetadata());
                }
                long committed = committedOffset(admin, group, in0);
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                    .describedGroups().get(group).get(20, TimeUnit.SECONDS);
                return "type=" + d.type() + " committed=" + committed;
            });
        }
        System.out.println("DONE failures=" + failures);
        System.exit(0);
    }
}
