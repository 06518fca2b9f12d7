// Kafka's Java producer (transactions v2 where the broker offers it) going on after the
// coordinator aborted its transaction with an epoch bump (transaction.timeout.ms 1 s),
// for tests/differential/test_aborted_with_bump.py. One STEP line per call the
// application makes, with JavaClients' format (the root cause's class when it fails).
// Arguments: bootstrap, topic (2 partitions, created by the test), transactional id.

import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class AbortedWithBump {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2];
        TopicPartition a = new TopicPartition(topic, 0);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("transaction.timeout.ms", "1000");
        p.put("max.block.ms", "20000");
        p.put("delivery.timeout.ms", "20000");
        p.put("request.timeout.ms", "10000");
        try (Admin admin = Admin.create(JavaClients.common(bootstrap));
             KafkaProducer<String, String> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "c0"));
            producer.send(new ProducerRecord<>(topic, 1, null, "c1"));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "doomed")).get(20, TimeUnit.SECONDS);
            // The coordinator aborts it: the last stable offset reaches the log end.
            long deadline = System.currentTimeMillis() + 20000;
            while (JavaClients.offset(admin, a, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
                   != JavaClients.offset(admin, a, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("never aborted");
                Thread.sleep(100);
            }
            JavaClients.step("sends", () -> {
                producer.send(new ProducerRecord<>(topic, 0, null, "late-a"));
                producer.send(new ProducerRecord<>(topic, 1, null, "late-b")).get(20, TimeUnit.SECONDS);
                return null;
            });
            JavaClients.step("commit", () -> { producer.commitTransaction(); return null; });
            JavaClients.step("abort", () -> { producer.abortTransaction(); return null; });
            JavaClients.step("next_transaction", () -> {
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, null, "again")).get(20, TimeUnit.SECONDS);
                producer.commitTransaction();
                return null;
            });
        } catch (Throwable e) {
            System.out.println("STEP setup FAIL " + e);
        }
        System.out.println("DONE");
    }
}
