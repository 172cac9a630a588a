package io.sparkstatestore.interop;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.function.UnaryOperator;

import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;

/**
 * What a main class of this jar does around its topology, as the Python side
 * ({@code spark_statestore.connectors.kafka.local.streams_app}) expects it: {@code --name value}
 * options; one JSON object per line on stdout for state changes ({@code {"event":"state"}}),
 * uncaught errors ({@code {"event":"error"}}) and query answers; one query per line on stdin
 * until {@code stop} or the end of stdin, then a clean close.
 */
final class Console {
  private Console() {}

  /** {@code --name value} pairs; names outside {@code known} are refused. */
  static Map<String, String> options(String[] args, Set<String> known) {
    if (args.length % 2 != 0) {
      throw new IllegalArgumentException("option " + args[args.length - 1] + " has no value");
    }
    Map<String, String> given = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --name value pairs, got " + args[i]);
      }
      String name = args[i].substring(2);
      if (!known.contains(name)) {
        throw new IllegalArgumentException("unknown option --" + name + "; known: " + known);
      }
      given.put(name, args[i + 1]);
    }
    return given;
  }

  /** Starts {@code streams}, answers stdin's queries with {@code answers} until told to stop,
   * then closes it. */
  static void run(KafkaStreams streams, UnaryOperator<String> answers)
      throws IOException, InterruptedException {
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    CountDownLatch closed = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          synchronized (out) {
            out.println("{\"event\":\"state\",\"state\":\"" + now + "\"}");
          }
          if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
            closed.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        exception -> {
          synchronized (out) {
            out.println(
                "{\"event\":\"error\",\"message\":" + Json.string(String.valueOf(exception)) + "}");
          }
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(30))));
    streams.start();
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      if (line.trim().equals("stop")) {
        break;
      }
      String answer = answers.apply(line.trim());
      synchronized (out) {
        out.println(answer);
      }
    }
    streams.close(Duration.ofSeconds(30));
    closed.await();
    synchronized (out) {
      out.println("{\"event\":\"stopped\"}");
    }
  }
}
