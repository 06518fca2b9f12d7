// N transactional Java producers (one thread each, its own transactional.id) running
// short transactions for S seconds, every abortEvery-th aborted (0: none), for
// bench/txn_stress.py. Prints "FAIL <id> after <n> txns: <exception>" per producer that
// failed, then "RESULT txns=<n> failures=<n>".
// Arguments: bootstrap topic prefix producers records seconds partitions [abortEvery]
import java.util.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnStress {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], prefix = a[2];
        int n = Integer.parseInt(a[3]), records = Integer.parseInt(a[4]);
        double seconds = Double.parseDouble(a[5]);
        int partitions = Integer.parseInt(a[6]);
        int abortEvery = a.length > 7 ? Integer.parseInt(a[7]) : 0;
        AtomicLong txns = new AtomicLong();
        AtomicInteger failures = new AtomicInteger();
        long end = System.nanoTime() + (long) (seconds * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < n; t++) {
            final int id = t;
            Thread th = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("transactional.id", prefix + "-" + id);
                p.put("acks", "all");
                p.put("linger.ms", "0");
                byte[] value = new byte[100];
                int part = id % partitions;
                long i = 0;
                try (KafkaProducer<byte[], byte[]> producer =
                         new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
                    producer.initTransactions();
                    while (System.nanoTime() < end) {
                        producer.beginTransaction();
                        for (int r = 0; r < records; r++) {
                            producer.send(new ProducerRecord<>(topic, part, null, value));
                            part = (part + 1) % partitions;
                        }
                        i++;
                        if (abortEvery > 0 && i % abortEvery == 0) producer.abortTransaction();
                        else producer.commitTransaction();
                        txns.incrementAndGet();
                    }
                } catch (Throwable e) {
                    failures.incrementAndGet();
                    System.out.println("FAIL " + prefix + "-" + id + " after " + i + " txns: " + e);
                    e.printStackTrace(System.out);
                }
            });
            threads.add(th);
            th.start();
        }
        for (Thread th : threads) th.join();
        System.out.println("RESULT txns=" + txns.get() + " failures=" + failures.get());
    }
}
