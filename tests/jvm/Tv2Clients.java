// Transactions v2 (KIP-890 part 2) with Kafka's Java 4 producer, which uses it when the
// broker finalizes the transaction.version feature at 2: one "STEP <name> OK|FAIL <detail>"
// line per step (JavaClients.step), for tests/differential/test_transactions_v2.py.
// Arguments: bootstrap, a unique prefix for topic, group and transactional-id names, and
// optionally "interleave <topic> <transactions>" to run only the interleaving producer,
// or "downgrade" to run only the transaction.version downgrade steps (which leave the
// feature finalized at 2 again).

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.errors.*;

public class Tv2Clients {
    static boolean tv2Enabled(KafkaProducer<String, String> p) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        Object tm = f.get(p);
        return (Boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
    }

    static List<String> values(String bootstrap, String topic, String isolation, int n) {
        Map<String, String> extra = Map.of("isolation.level", isolation);
        try (KafkaConsumer<String, String> c = JavaClients.consumer(bootstrap, "read-" + UUID.randomUUID(), extra)) {
            c.subscribe(List.of(topic));
            List<String> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : JavaClients.pollUntil(c, n, 15000)) out.add(r.value());
            // Anything past n would be a bug: one more short poll to see it.
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) out.add(r.value());
            return out;
        }
    }

    static void send(KafkaProducer<String, String> p, String topic, int partition, String... values) throws Exception {
        for (String v : values) p.send(new ProducerRecord<>(topic, partition, v, v)).get(20, TimeUnit.SECONDS);
    }

    /** One consume-transform-produce transaction over what one poll returns (upper-cased
     *  into partition 0 of out, offsets sent to the transaction); the records it took.
     *  With commit false it stops before the commit, as a worker killed there would. */
    static int transform(KafkaConsumer<String, String> c, KafkaProducer<String, String> p, String out,
                         boolean commit) {
        ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(500));
        if (recs.isEmpty()) return 0;
        p.beginTransaction();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<String, String> r : recs) {
            p.send(new ProducerRecord<>(out, 0, r.key(), r.value().toUpperCase()));
            offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        }
        p.sendOffsetsToTransaction(offsets, c.groupMetadata());
        if (commit) p.commitTransaction(); else p.flush();
        return recs.count();
    }

    /** Transactions on partitions 0 and 1 of topic, every third aborted (the interleaving leg). */
    static String interleave(String bootstrap, String topic, String txnId, int transactions) throws Exception {
        int committed = 0;
        try (KafkaProducer<String, String> p = JavaClients.producer(bootstrap, txnId)) {
            p.initTransactions();
            JavaClients.check(tv2Enabled(p), "the producer does not use transactions v2");
            for (int i = 0; i < transactions; i++) {
                p.beginTransaction();
                boolean abort = i % 3 == 2;
                String tag = abort ? "java-aborted-" : "java-";
                send(p, topic, i % 2, tag + i + "-a");
                send(p, topic, (i + 1) % 2, tag + i + "-b");
                if (abort) p.abortTransaction(); else { p.commitTransaction(); committed++; }
            }
        }
        return "committed=" + committed;
    }

    static short epoch(KafkaProducer<String, String> p) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        Object tm = f.get(p);
        Field pf = tm.getClass().getDeclaredField("producerIdAndEpoch");
        pf.setAccessible(true);
        Object pe = pf.get(tm);
        return (Short) pe.getClass().getField("epoch").get(pe);
    }

    static void setTransactionVersion(Admin admin, short level, FeatureUpdate.UpgradeType type) throws Exception {
        admin.updateFeatures(Map.of("transaction.version", new FeatureUpdate(level, type)),
                             new UpdateFeaturesOptions()).all().get(20, TimeUnit.SECONDS);
    }

    /** transaction.version downgraded to 1 (Admin.updateFeatures, as kafka-features does)
     *  while a v2 transaction is open: it commits as v2 (a transaction's version is fixed
     *  when it starts); a producer started afterwards uses v1 (its epoch stays the same
     *  across transactions: EndTxn below v5 does not bump it). Then back to 2. */
    static void downgrade(Admin admin, String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-down";
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        KafkaProducer<String, String> before = JavaClients.producer(bootstrap, prefix + "-before");
        try {
            before.initTransactions();
            JavaClients.step("open_v2_transaction", () -> {
                JavaClients.check(tv2Enabled(before), "the first producer does not use transactions v2");
                before.beginTransaction();
                send(before, topic, 0, "v2-a", "v2-b");
                return "epoch=" + epoch(before);
            });
            JavaClients.step("downgrade_to_1", () -> {
                setTransactionVersion(admin, (short) 1, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE);
                FeatureMetadata f = admin.describeFeatures().featureMetadata().get(20, TimeUnit.SECONDS);
                FinalizedVersionRange level = f.finalizedFeatures().get("transaction.version");
                JavaClients.check(level != null && level.maxVersionLevel() == 1, "finalized " + level);
                return "finalized=" + level.maxVersionLevel();
            });
            JavaClients.step("open_transaction_commits", () -> {
                short e = epoch(before);
                before.commitTransaction();
                JavaClients.check(epoch(before) == e + 1, "epoch " + e + " -> " + epoch(before));
                return "epoch " + e + " -> " + epoch(before);
            });
            JavaClients.step("new_producer_uses_v1", () -> {
                try (KafkaProducer<String, String> after = JavaClients.producer(bootstrap, prefix + "-after")) {
                    after.initTransactions();
                    JavaClients.check(!tv2Enabled(after), "the new producer uses transactions v2");
                    short e = epoch(after);
                    for (int i = 0; i < 2; i++) {
                        after.beginTransaction();
                        send(after, topic, 0, "v1-" + i);
                        after.commitTransaction();
                    }
                    JavaClients.check(epoch(after) == e, "epoch " + e + " -> " + epoch(after));
                    return "v2=false epoch=" + e + " after 2 transactions";
                }
            });
            JavaClients.step("all_committed", () -> {
                List<String> committed = values(bootstrap, topic, "read_committed", 4);
                JavaClients.check(committed.equals(List.of("v2-a", "v2-b", "v1-0", "v1-1")), "read_committed " + committed);
                return "committed=" + committed;
            });
        } finally {
            before.close(Duration.ZERO);
            setTransactionVersion(admin, (short) 2, FeatureUpdate.UpgradeType.UPGRADE);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        if (args.length > 2 && args[2].equals("interleave")) {
            JavaClients.step("interleave", () -> interleave(bootstrap, args[3], prefix + "-java",
                                                              Integer.parseInt(args[4])));
            System.out.println("DONE");
            return;
        }
        if (args.length > 2 && args[2].equals("downgrade")) {
            try (Admin admin = Admin.create(JavaClients.common(bootstrap))) {
                downgrade(admin, bootstrap, prefix);
            }
            System.out.println("DONE");
            return;
        }
        String topic = prefix + "-t", in = prefix + "-in", out = prefix + "-out";
        TopicPartition t0 = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(JavaClients.common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1), new NewTopic(in, 1, (short) 1),
                                       new NewTopic(out, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);

            JavaClients.step("feature", () -> {
                FeatureMetadata f = admin.describeFeatures().featureMetadata().get(20, TimeUnit.SECONDS);
                FinalizedVersionRange level = f.finalizedFeatures().get("transaction.version");
                SupportedVersionRange range = f.supportedFeatures().get("transaction.version");
                JavaClients.check(level != null && level.maxVersionLevel() == 2, "finalized " + level);
                return "finalized=" + level.maxVersionLevel() + " supported=" + range.minVersion() + "-" + range.maxVersion();
            });

            JavaClients.step("commit_abort_visibility", () -> {
                try (KafkaProducer<String, String> p = JavaClients.producer(bootstrap, prefix + "-vis")) {
                    p.initTransactions();
                    JavaClients.check(tv2Enabled(p), "the producer does not use transactions v2");
                    p.beginTransaction();
                    send(p, topic, 0, "c1", "c2", "c3");
                    p.commitTransaction();
                    p.beginTransaction();
                    send(p, topic, 0, "a1", "a2");
                    p.abortTransaction();
                    p.beginTransaction();
                    send(p, topic, 0, "c4");
                    p.commitTransaction();
                    // v2: an abort with nothing sent still ends (and bumps) the epoch.
                    p.beginTransaction();
                    p.abortTransaction();
                }
                List<String> committed = values(bootstrap, topic, "read_committed", 4);
                List<String> all = values(bootstrap, topic, "read_uncommitted", 6);
                JavaClients.check(committed.equals(List.of("c1", "c2", "c3", "c4")), "read_committed " + committed);
                JavaClients.check(all.equals(List.of("c1", "c2", "c3", "a1", "a2", "c4")), "read_uncommitted " + all);
                return "committed=" + committed;
            });

            JavaClients.step("epoch_bump_per_transaction", () -> {
                // The partition's producer state shows the epoch of the last marker: the
                // producer started at epoch 0 and each EndTxn bumped it once.
                int epoch = -1;
                for (ProducerState s : admin.describeProducers(List.of(t0)).partitionResult(t0)
                        .get(20, TimeUnit.SECONDS).activeProducers()) epoch = Math.max(epoch, s.producerEpoch());
                JavaClients.check(epoch == 3, "epoch " + epoch);
                return "epoch=" + epoch;
            });

            JavaClients.step("fencing", () -> {
                String id = prefix + "-fence";
                KafkaProducer<String, String> zombie = JavaClients.producer(bootstrap, id);
                zombie.initTransactions();
                zombie.beginTransaction();
                send(zombie, topic, 0, "zombie");
                String error;
                try (KafkaProducer<String, String> p = JavaClients.producer(bootstrap, id)) {
                    p.initTransactions();  // fences the zombie, aborts its transaction
                    p.beginTransaction();
                    send(p, topic, 0, "successor");
                    p.commitTransaction();
                    try {
                        zombie.commitTransaction();
                        error = "none";
                    } catch (KafkaException e) {
                        error = e.getClass().getSimpleName();
                    }
                } finally {
                    zombie.close(Duration.ZERO);
                }
                JavaClients.check(error.equals("ProducerFencedException") || error.equals("InvalidProducerEpochException"),
                                  "zombie commit: " + error);
                List<String> committed = values(bootstrap, topic, "read_committed", 5);
                JavaClients.check(committed.contains("successor") && !committed.contains("zombie"), "read_committed " + committed);
                return "zombie=" + error;
            });

            JavaClients.step("consume_transform_produce_killed_worker", () -> {
                try (KafkaProducer<String, String> p = JavaClients.producer(bootstrap, null)) {
                    for (int i = 0; i < 20; i++) send(p, in, 0, "m" + i);
                }
                String group = prefix + "-ctp", id = prefix + "-worker";
                // Worker 1 commits 2 batches of 5, then dies in the middle of its third.
                KafkaConsumer<String, String> c1 = JavaClients.consumer(bootstrap, group, Map.of("max.poll.records", "5"));
                KafkaProducer<String, String> w1 = JavaClients.producer(bootstrap, id);
                w1.initTransactions();
                c1.subscribe(List.of(in));
                int batches = 0;
                while (batches < 3) {
                    if (transform(c1, w1, out, batches < 2) > 0) batches++;  // the third: killed before commit
                }
                w1.close(Duration.ZERO);
                c1.close(Duration.ZERO);
                // Worker 2 takes over with the same transactional id: the zombie's open
                // transaction is aborted, it carries on from the committed offsets.
                try (KafkaConsumer<String, String> c2 = JavaClients.consumer(bootstrap, group, Map.of());
                     KafkaProducer<String, String> w2 = JavaClients.producer(bootstrap, id)) {
                    w2.initTransactions();
                    c2.subscribe(List.of(in));
                    int done = 0;
                    long deadline = System.currentTimeMillis() + 30000;
                    while (done < 10 && System.currentTimeMillis() < deadline) {
                        done += transform(c2, w2, out, true);
                    }
                    JavaClients.check(done == 10, "worker 2 processed " + done);
                }
                List<String> got = values(bootstrap, out, "read_committed", 20);
                List<String> want = new ArrayList<>();
                for (int i = 0; i < 20; i++) want.add("M" + i);
                JavaClients.check(got.equals(want), "output " + got);
                return "output=" + got.size();
            });
        }
        System.out.println("DONE");
    }
}
