// Kafka's KafkaShareConsumer (KIP-932, kafka-clients 4.4.0) against a broker that serves
// share groups, for tests/differential/test_share_clients.py: implicit acknowledgement,
// explicit acknowledge(record, RELEASE / REJECT / ACCEPT) with commitSync, then the Admin
// share-group calls. Prints JavaClients' "STEP <name> OK|FAIL <detail>" lines, then DONE.
// Arguments: bootstrap, a unique prefix for the topic and group names.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;

public class JavaShareConsumer {
    static final int N = 10;

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group,
                                                       boolean explicit) {
        Properties p = JavaClients.common(bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        if (explicit) p.put("share.acknowledgement.mode", "explicit");
        return new KafkaShareConsumer<>(p);
    }

    // Records until `want` arrived or `ms` passed; explicit mode acknowledges each poll's
    // records (`how` by offset, ACCEPT otherwise) and commits before the next poll.
    static List<ConsumerRecord<String, String>> pollUntil(
            KafkaShareConsumer<String, String> c, int want, Map<Long, AcknowledgeType> how,
            boolean explicit, long ms) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(500));
            for (ConsumerRecord<String, String> r : records) {
                got.add(r);
                if (explicit) c.acknowledge(r, how.getOrDefault(r.offset(), AcknowledgeType.ACCEPT));
            }
            if (explicit && !records.isEmpty()) {
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : c.commitSync().entrySet())
                    JavaClients.check(e.getValue().isEmpty(), "commitSync: " + e);
            }
        }
        return got;
    }

    // Records `from`..`to` - 1 (key k<i>, value v<i>) on `topic`.
    static void produce(String bootstrap, String topic, int from, int to) {
        try (KafkaProducer<String, String> p = JavaClients.producer(bootstrap, null)) {
            for (int i = from; i < to; i++) p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            p.flush();
        }
    }

    static String summary(List<ConsumerRecord<String, String>> records) {
        StringBuilder s = new StringBuilder();
        records.stream().sorted(Comparator.comparingLong(ConsumerRecord::offset)).forEach(r ->
            s.append(s.length() == 0 ? "" : ",").append(r.offset()).append(':')
             .append(r.deliveryCount().map(String::valueOf).orElse("?")));
        return s.toString();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        // One topic per group: a record produced after a step is that group's sentinel.
        String topic = prefix + "-share", implicitTopic = prefix + "-share-implicit",
            implicit = prefix + "-implicit", explicit = prefix + "-explicit";
        try (Admin admin = Admin.create(JavaClients.common(bootstrap))) {
            JavaClients.step("admin.setup", () -> {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1),
                                           new NewTopic(implicitTopic, 1, (short) 1)))
                    .all().get(30, TimeUnit.SECONDS);
                Map<ConfigResource, Collection<AlterConfigOp>> configs = new HashMap<>();
                for (String g : List.of(implicit, explicit))
                    configs.put(new ConfigResource(ConfigResource.Type.GROUP, g), List.of(
                        new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                          AlterConfigOp.OpType.SET)));
                admin.incrementalAlterConfigs(configs).all().get(30, TimeUnit.SECONDS);
                produce(bootstrap, topic, 0, N);
                produce(bootstrap, implicitTopic, 0, N);
                Thread.sleep(1000); // Kafka applies a group config through its metadata log
                return null;
            });
            JavaClients.step("consumer.implicit", () -> {
                String first, after;
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, implicit, false)) {
                    c.subscribe(List.of(implicitTopic));
                    first = summary(pollUntil(c, N, Map.of(), false, 30_000));
                    c.commitSync(); // implicit mode: accepts what the last poll returned
                }
                // A record produced now comes alone: an unaccepted one would come first.
                produce(bootstrap, implicitTopic, N, N + 1);
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, implicit, false)) {
                    c.subscribe(List.of(implicitTopic));
                    after = summary(pollUntil(c, 1, Map.of(), false, 30_000));
                }
                return "first=" + first + " after=" + after;
            });
            JavaClients.step("consumer.explicit", () -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, explicit, true)) {
                    c.subscribe(List.of(topic));
                    String first = summary(pollUntil(c, N, Map.of(
                        0L, AcknowledgeType.RELEASE, 1L, AcknowledgeType.REJECT), true, 30_000));
                    String again = summary(pollUntil(c, 1, Map.of(), true, 30_000));
                    produce(bootstrap, topic, N, N + 1); // alone, unless offset 1 came back
                    String more = summary(pollUntil(c, 1, Map.of(), true, 30_000));
                    return "first=" + first + " again=" + again + " more=" + more;
                }
            });
            JavaClients.step("admin.describeShareGroups", () -> {
                long deadline = System.currentTimeMillis() + 30_000;
                while (true) {
                    ShareGroupDescription d = admin.describeShareGroups(List.of(explicit))
                        .describedGroups().get(explicit).get(30, TimeUnit.SECONDS);
                    if (d.groupState() == GroupState.EMPTY || System.currentTimeMillis() > deadline)
                        return "state=" + d.groupState() + " members=" + d.members().size();
                    Thread.sleep(200);
                }
            });
            JavaClients.step("admin.listShareGroupOffsets", () -> {
                SharePartitionOffsetInfo info = admin.listShareGroupOffsets(
                        Map.of(explicit, new ListShareGroupOffsetsSpec()))
                    .partitionsToOffsetInfo(explicit).get(30, TimeUnit.SECONDS)
                    .get(new TopicPartition(topic, 0));
                return "lag=" + info.lag().orElse(-1L);
            });
            JavaClients.step("admin.alterShareGroupOffsets", () -> {
                admin.alterShareGroupOffsets(explicit, Map.of(new TopicPartition(topic, 0), 5L))
                    .all().get(30, TimeUnit.SECONDS);
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, explicit, true)) {
                    c.subscribe(List.of(topic));
                    return "after=" + summary(pollUntil(c, N + 1 - 5, Map.of(), true, 30_000));
                }
            });
            JavaClients.step("admin.deleteShareGroups", () -> {
                long deadline = System.currentTimeMillis() + 30_000;
                while (true) {
                    try {
                        admin.deleteShareGroups(List.of(explicit, implicit)).all()
                            .get(30, TimeUnit.SECONDS);
                        return "deleted=2";
                    } catch (java.util.concurrent.ExecutionException e) {
                        // A closed member leaves a moment after close (Kafka).
                        if (!(e.getCause() instanceof org.apache.kafka.common.errors.GroupNotEmptyException)
                                || System.currentTimeMillis() > deadline) throw e;
                        Thread.sleep(200);
                    }
                }
            });
        }
        System.out.println("DONE");
        System.exit(0);
    }
}
