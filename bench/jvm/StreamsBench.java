import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;

/**
 * A stateless exactly_once_v2 Kafka Streams app for bench/streams_groups.py:
 *
 *   java StreamsBench BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR GROUP_PROTOCOL
 *
 * Copies INPUT to OUTPUT (values reversed, so each record is touched). Starts paused,
 * so the bench can wait for a stable group before the clock starts. Reads commands
 * on stdin: "resume" resumes processing, "close" closes and leaves the group (the
 * same close on both group protocols: a classic member would otherwise stay until its
 * session times out). Prints "STATE s" on each state change and "TASKS a,b" whenever
 * the active tasks it owns change (polled every 10 ms: the same signal whichever
 * protocol or broker assigned them).
 */
public class StreamsBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], applicationId = args[1], input = args[2], output = args[3];
        String stateDir = args[4], groupProtocol = args[5];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        if (groupProtocol.equals("classic")) {
            // The heartbeat interval and session timeout the brokers give streams-protocol
            // members (their group.streams.* keys, set by the bench).
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.<byte[], String>stream(input)
            .mapValues(v -> new StringBuilder(v).reverse().toString())
            .to(output);

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> say("STATE " + now));
        streams.setUncaughtExceptionHandler(e -> {
            say("ERROR " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.pause();
        streams.start();

        Thread watcher = new Thread(() -> {
            String last = null;
            while (!Thread.currentThread().isInterrupted()) {
                TreeSet<String> tasks = new TreeSet<>();
                try {
                    for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                        for (TaskMetadata task : t.activeTasks()) tasks.add(task.taskId().toString());
                    }
                } catch (RuntimeException e) {
                    return;  // shutting down
                }
                String now = String.join(",", tasks);
                if (!now.equals(last)) {
                    say("TASKS " + now);
                    last = now;
                }
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        watcher.setDaemon(true);
        watcher.start();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null && !line.equals("close")) {
            if (line.equals("resume")) streams.resume();
        }
        watcher.interrupt();
        streams.close(CloseOptions.groupMembershipOperation(
            CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(30)));
        say("CLOSED");
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
