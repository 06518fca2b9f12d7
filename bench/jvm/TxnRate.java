// One transactional Java producer (kafka-clients of tests/kafka/pom.xml) committing
// transactions of N records as fast as it can, for bench/transactions_v2.py. It uses
// transactions v2 when the broker finalizes transaction.version 2, else v1.
// Arguments: bootstrap topic transactional-id records value-size seconds warmup partitions.
// Prints "RESULT v2=<bool> txns=<n> seconds=<s> commit_ms=<ms,ms,...>".

import java.lang.reflect.Field;
import java.util.*;

import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnRate {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], tid = a[2];
        int records = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        double seconds = Double.parseDouble(a[5]);
        int warmup = Integer.parseInt(a[6]), partitions = Integer.parseInt(a[7]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", tid);
        p.put("acks", "all");
        p.put("linger.ms", "0");
        byte[] value = new byte[size];
        new Random(1).nextBytes(value);
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            Field f = KafkaProducer.class.getDeclaredField("transactionManager");
            f.setAccessible(true);
            Object tm = f.get(producer);
            int part = 0;
            List<Double> commits = new ArrayList<>();
            long end = Long.MAX_VALUE, started = 0;
            for (int i = 0; System.nanoTime() < end; i++) {
                if (i == warmup) {
                    commits.clear();
                    started = System.nanoTime();
                    end = started + (long) (seconds * 1e9);
                }
                producer.beginTransaction();
                for (int r = 0; r < records; r++) {
                    producer.send(new ProducerRecord<>(topic, part, null, value));
                    part = (part + 1) % partitions;
                }
                long t0 = System.nanoTime();
                producer.commitTransaction();
                commits.add((System.nanoTime() - t0) / 1e6);
            }
            boolean v2 = (Boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
            StringBuilder ms = new StringBuilder();
            for (double c : commits) ms.append(ms.length() == 0 ? "" : ",").append(String.format("%.3f", c));
            System.out.println("RESULT v2=" + v2 + " txns=" + commits.size() + " seconds="
                + (System.nanoTime() - started) / 1e9 + " commit_ms=" + ms);
        }
    }
}
