// A share-group worker (KIP-932) with Kafka's Java KafkaShareConsumer (4.4), for
// `txbroker chaos --share` (docs/testing-your-pipeline.md, "Share-group worker pools").
// Build it with `make chaos-recipes`, then:
//
//   txbroker chaos --share --input jobs --instances 3 --duration 60 -- \
//       java -cp '.jvm/chaos-recipes:.jvm/kafka-4.4.0/*' ChaosShareWorker
//
// The Java twin of testing/chaos/recipes/confluent_share_worker.py: explicit
// acknowledgement, each polled record ACCEPTed after its work, commitSync after each
// poll; every delivery (with its delivery count), ACCEPT sent and answer written as a
// JSON line into TXBROKER_HISTORY for the chaos checker. An answer is "failed" only
// when the broker said the member does not hold the record (InvalidRecordStateException);
// any other error may have come after the broker applied it: "unknown". Crash-only.

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ChaosShareWorker {
    static String env(String name, String otherwise) {
        String value = System.getenv(name);
        return value == null ? otherwise : value;
    }

    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') out.append('\\').append(ch);
            else if (ch < 0x20) out.append(String.format("\\u%04x", (int) ch));
            else out.append(ch);
        }
        return out.append('"').toString();
    }

    // One write() per line on an O_APPEND stream: a SIGKILL tears at most the last one.
    static final class History {
        final FileOutputStream out;
        final String worker;
        int seq = 0;

        History(String folder, String instance) throws IOException {
            Files.createDirectories(Path.of(folder));
            worker = instance + "-" + ProcessHandle.current().pid();
            out = new FileOutputStream(Path.of(folder, "worker-" + worker + ".jsonl").toFile(), true);
        }

        void write(String fields) throws IOException {
            double ts = System.currentTimeMillis() / 1000.0;
            out.write(("{" + fields + ", \"w\": " + quote(worker) + ", \"ts\": " + ts + "}\n")
                .getBytes(StandardCharsets.UTF_8));
        }

        int delivered(ConsumerRecord<String, String> r) throws IOException {
            seq++;
            String count = r.deliveryCount().map(String::valueOf).orElse("null");
            write("\"d\": [" + quote(r.topic()) + ", " + r.partition() + ", " + r.offset() + ", "
                  + quote(r.key()) + ", " + count + "], \"s\": " + seq);
            return seq;
        }

        void seqs(String kind, List<Integer> seqs, String error) throws IOException {
            write(quote(kind) + ": " + seqs + ", \"error\": " + quote(error));
        }
    }

    public static void main(String[] args) throws IOException {
        String topic = env("TXBROKER_INPUT", "jobs");
        History history = new History(env("TXBROKER_HISTORY", "share-history"),
                                      env("TXBROKER_INSTANCE", "0"));
        Properties c = new Properties();
        c.put("bootstrap.servers", System.getenv("TXBROKER_BOOTSTRAP"));
        c.put("group.id", env("TXBROKER_GROUP", "chaos-workers"));
        c.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        // A lost answer (a broker crash or hang, a dropped response) is given up on after 5 s.
        c.put("request.timeout.ms", "5000");
        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (true) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                Map<String, List<Integer>> byPartition = new HashMap<>();
                List<Integer> all = new ArrayList<>();
                for (ConsumerRecord<String, String> r : records) {
                    int seq = history.delivered(r);
                    Thread.sleep(20);  // the work, done before the ACCEPT
                    byPartition.computeIfAbsent(r.topic() + "-" + r.partition(), k -> new ArrayList<>()).add(seq);
                    all.add(seq);
                }
                // "sent" before the first acknowledge: from here a kill leaves them unknown.
                history.seqs("sent", all, null);
                for (ConsumerRecord<String, String> r : records) {
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                Map<TopicIdPartition, Optional<KafkaException>> results;
                try {
                    results = consumer.commitSync(Duration.ofSeconds(10));
                } catch (KafkaException e) {
                    history.seqs("unknown", all, e.toString());
                    continue;
                }
                Map<String, Optional<KafkaException>> answers = new HashMap<>();
                results.forEach((tp, error) -> answers.put(tp.topic() + "-" + tp.partition(), error));
                for (Map.Entry<String, List<Integer>> e : byPartition.entrySet()) {
                    Optional<KafkaException> answer = answers.get(e.getKey());
                    if (answer == null) history.seqs("unknown", e.getValue(), "no result for the partition");
                    else if (answer.isEmpty()) history.seqs("done", e.getValue(), null);
                    else if (answer.get() instanceof InvalidRecordStateException)
                        history.seqs("done", e.getValue(), answer.get().toString());
                    else history.seqs("unknown", e.getValue(), answer.get().toString());
                }
            }
        } catch (Exception e) {
            // Crash-only: the supervisor starts us again; what we held comes back.
            e.printStackTrace();
            System.exit(1);
        }
    }
}
