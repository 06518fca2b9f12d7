// Runs many of Kafka's command-line tools in one JVM (a JVM start costs about a second):
// each line of the script file is one command, tab-separated: a stdin file or "-", the
// tool's main class, then its arguments. Each command's stdout and stderr go to the
// report file between "=== BEGIN n" and "=== END n exit=<status>" lines.
// The tools end with Kafka's Exit.exit, which is turned into an exception here; some
// catch it and exit again with 1, so the first status counts, and the lines they print
// about it are dropped from the report. Shutdown hooks a tool registers through Kafka's
// Exit (the console producer closes, and so flushes, its producer in one) run when its
// command ends, as they would when its own JVM ends.

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

// Kafka 4.4 moved Exit from org.apache.kafka.common.utils to its internals package (same API).
import org.apache.kafka.common.utils.internals.Exit;

public class ToolRunner {
    static final class ExitCalled extends RuntimeException {
        final int status;
        ExitCalled(int status) { super(SENTINEL, null, false, false); this.status = status; }
    }

    static final String SENTINEL = "tool-runner-exit";
    static Integer firstExit;
    static final List<Runnable> hooks = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        List<String> script = Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8);
        PrintStream realOut = System.out, realErr = System.err;
        InputStream realIn = System.in;
        Exit.setExitProcedure((status, message) -> {
            if (firstExit == null) firstExit = status;
            throw new ExitCalled(status);
        });
        Exit.setShutdownHookAdder((name, hook) -> hooks.add(hook));
        try (PrintStream report = new PrintStream(new FileOutputStream(args[1]), true, "UTF-8")) {
            int n = 0;
            for (String line : script) {
                if (line.isBlank()) continue;
                String[] fields = line.split("\t");
                ByteArrayOutputStream captured = new ByteArrayOutputStream();
                PrintStream sink = new PrintStream(captured, true, "UTF-8");
                int status = 0;
                firstExit = null;
                System.setOut(sink);
                System.setErr(sink);
                System.setIn(fields[0].equals("-") ? new ByteArrayInputStream(new byte[0])
                                                   : new FileInputStream(fields[0]));
                try {
                    Class.forName(fields[1]).getMethod("main", String[].class)
                        .invoke(null, (Object) Arrays.copyOfRange(fields, 2, fields.length));
                } catch (java.lang.reflect.InvocationTargetException e) {
                    Throwable cause = e.getCause();
                    if (cause instanceof ExitCalled) {
                        status = firstExit;
                    } else if (firstExit != null) {
                        status = firstExit;
                    } else {
                        status = -1;
                        cause.printStackTrace(sink);
                    }
                } finally {
                    for (Runnable hook : hooks) {
                        try {
                            hook.run();
                        } catch (RuntimeException e) {
                            if (!(e instanceof ExitCalled)) e.printStackTrace(sink);
                        }
                    }
                    hooks.clear();
                    System.setOut(realOut);
                    System.setErr(realErr);
                    System.setIn(realIn);
                }
                sink.flush();
                report.println("=== BEGIN " + n);
                for (String out : captured.toString("UTF-8").split("\n", -1)) {
                    if (!out.contains(SENTINEL) && !out.contains("ToolRunner$ExitCalled")) report.println(out);
                }
                report.println("=== END " + n + " exit=" + status);
                n++;
            }
        }
        System.exit(0);
    }
}
