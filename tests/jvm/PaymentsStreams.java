import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The payments validator as a Kafka Streams topology with exactly_once_v2, for
 * tests/differential/test_kafka_streams.py:
 *
 *   java PaymentsStreams BOOTSTRAP APPLICATION_ID PREFIX STATE_DIR DELAY_MS [GROUP_PROTOCOL
 *        [APPLICATION_SERVER]]
 *
 * Reads PREFIX-payments (key: payment id, value: "account,amount"). Valid payments
 * (a known account, an amount above 0) go to PREFIX-validated unchanged, the others
 * to PREFIX-rejected; valid payments are re-keyed by account (a repartition topic)
 * and summed per account in the state store "balances" (RocksDB, changelog
 * APPLICATION_ID-balances-changelog); every new balance goes to PREFIX-balances as
 * "account" -> "sum". The record cache is off, so each payment gives one balance.
 * DELAY_MS slows each valid payment down, so a test can kill the instance mid-stream.
 * GROUP_PROTOCOL is "classic" (the default) or "streams" (KIP-1071: the broker assigns
 * the tasks; its group.streams.* keys set the session timeout and heartbeat interval).
 * Prints "STATE <state>" on each state change. With APPLICATION_SERVER (host:port, the
 * interactive-query endpoint) it also prints, every second while RUNNING, what
 * KafkaStreams.metadataForAllStreamsClients() says: "METADATA host:port active=[topic-p,
 * ...] standby=[...]; host:port ..." (clients sorted, partitions sorted).
 */
public class PaymentsStreams {
    static boolean valid(String value) {
        String[] parts = value.split(",");
        if (parts.length != 2 || !parts[0].startsWith("acct-")) return false;
        try {
            return Long.parseLong(parts[1]) > 0;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    static java.util.List<String> partitions(java.util.Set<org.apache.kafka.common.TopicPartition> tps) {
        java.util.List<String> out = new java.util.ArrayList<>();
        for (org.apache.kafka.common.TopicPartition tp : tps) out.add(tp.topic() + "-" + tp.partition());
        java.util.Collections.sort(out);
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], applicationId = args[1], prefix = args[2], stateDir = args[3];
        long delayMs = Long.parseLong(args[4]);
        String groupProtocol = args.length > 5 ? args[5] : "classic";
        String applicationServer = args.length > 6 ? args[6] : null;

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        if (applicationServer != null) {
            props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, applicationServer);
        }
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // A killed instance's member leaves the group soon; its open transaction is
        // fenced by the restarted instance (same process id from the state directory).
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 2000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> payments = builder.stream(prefix + "-payments");
        payments.filterNot((id, value) -> valid(value)).to(prefix + "-rejected");
        KStream<String, String> accepted = payments.filter((id, value) -> valid(value))
            .peek((id, value) -> {
                if (delayMs > 0) {
                    try {
                        Thread.sleep(delayMs);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            });
        accepted.to(prefix + "-validated");
        accepted
            .groupBy((id, value) -> value.split(",")[0], Grouped.with(Serdes.String(), Serdes.String()))
            .aggregate(() -> 0L,
                (account, value, sum) -> sum + Long.parseLong(value.split(",")[1]),
                Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("balances")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .mapValues(sum -> Long.toString(sum))
            .to(prefix + "-balances", Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("ERROR " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        while (applicationServer != null && !stopped.await(1, java.util.concurrent.TimeUnit.SECONDS)) {
            if (streams.state() != KafkaStreams.State.RUNNING) continue;
            java.util.List<String> clients = new java.util.ArrayList<>();
            for (org.apache.kafka.streams.StreamsMetadata m : streams.metadataForAllStreamsClients()) {
                clients.add(m.host() + ":" + m.port() + " active=" + partitions(m.topicPartitions())
                    + " standby=" + partitions(m.standbyTopicPartitions()));
            }
            java.util.Collections.sort(clients);
            System.out.println("METADATA " + String.join("; ", clients));
            System.out.flush();
        }
        stopped.await();
    }
}
