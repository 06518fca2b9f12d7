// An exactly-once consume-transform-produce pipeline with Kafka's Java client (4.3), for
// `txbroker chaos` (docs/testing-your-pipeline.md, "Recipes"). Build it with
// `make chaos-recipes` (javac against the jars `make kafka-jars` fetched), then:
//
//   txbroker chaos --input orders --output payments --instances 2 --duration 60 -- \
//       java -cp '.jvm/chaos-recipes:.jvm/kafka-4.4.0/*' ChaosPipeline
//
// Each input record goes to the same partition of the output with the same key, its
// offsets committed in the same transaction (sendOffsetsToTransaction with the
// consumer's groupMetadata(): KIP-447 fencing; under read_committed the consumer
// fetches its committed offsets with require_stable). Crash-only: any error ends the
// process, the supervisor restarts it from the group's committed offsets. The settings
// a crash test needs are commented where they are set.

import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ChaosPipeline {
    static String env(String name, String otherwise) {
        String value = System.getenv(name);
        return value == null ? otherwise : value;
    }

    public static void main(String[] args) {
        String bootstrap = System.getenv("TXBROKER_BOOTSTRAP");
        String instance = env("TXBROKER_INSTANCE", "0");
        String source = env("TXBROKER_INPUT", "orders");
        String sink = env("TXBROKER_OUTPUT", "payments");
        String group = env("TXBROKER_GROUP", "chaos-pipeline");

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        // Static membership and a short session: a SIGKILLed member is replaced at once by
        // its restart, not after the 45 s default session timeout.
        c.put("group.instance.id", group + "-" + instance);
        c.put("session.timeout.ms", "6000");
        c.put("heartbeat.interval.ms", "1000");
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", "100");

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        // Stable across restarts: the restarted instance fences its previous incarnation
        // and aborts the transaction it left open.
        p.put("transactional.id", group + "-" + instance);
        p.put("transaction.timeout.ms", "10000");
        // A lost answer (a broker crash, a dropped response) is retried after this.
        p.put("request.timeout.ms", "5000");

        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<byte[], byte[]>> polled = records.records(tp);
                    for (ConsumerRecord<byte[], byte[]> r : polled) {
                        producer.send(new ProducerRecord<>(sink, tp.partition(), r.key(), r.value()));
                    }
                    offsets.put(tp, new OffsetAndMetadata(polled.get(polled.size() - 1).offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
            }
        } catch (Exception e) {
            // Crash-only: the supervisor restarts us from the group's committed offsets.
            e.printStackTrace();
            System.exit(1);
        }
    }
}
