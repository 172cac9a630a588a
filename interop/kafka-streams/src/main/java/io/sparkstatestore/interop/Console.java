package io.sparkstatestore.interop;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;
import java.util.function.UnaryOperator;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.processor.StateRestoreListener;

/**
 * What a main class of this jar does around its topology, as the Python side
 * ({@code spark_statestore.connectors.kafka.local.streams_app}) expects it: {@code --name value}
 * options; one JSON object per line on stdout for the topology ({@code {"event":"topology"}}),
 * state changes ({@code {"event":"state"}}), uncaught errors ({@code {"event":"error"}}) and
 * query answers; one query per line on stdin until {@code stop} or the end of stdin, then a
 * clean close.
 */
final class Console {
  private Console() {}

  /** The command-line settings every app of this jar has (each app's options extend it). */
  abstract static class Common {
    String bootstrapServers;
    String applicationId;
    String stateDir;
    boolean positionHeaders;
    long commitIntervalMs = 100;
    long sessionTimeoutMs;
    long cacheMaxBytes = -1; // Kafka Streams' default

    /** Reads these settings from {@code given} ({@code --bootstrap-servers} and {@code
     * --state-dir} required; the others keep the app's defaults when not given). */
    void readCommon(Map<String, String> given) {
      bootstrapServers = required(given, "bootstrap-servers");
      stateDir = required(given, "state-dir");
      applicationId = given.getOrDefault("application-id", applicationId);
      positionHeaders = Boolean.parseBoolean(
          given.getOrDefault("position-headers", String.valueOf(positionHeaders)));
      commitIntervalMs = number(given, "commit-interval-ms", commitIntervalMs);
      sessionTimeoutMs = number(given, "session-timeout-ms", sessionTimeoutMs);
      cacheMaxBytes = number(given, "cache-max-bytes", cacheMaxBytes);
    }
  }

  /** The settings every app of this jar runs with: exactly-once v2, one stream thread, Kafka
   * Streams' internal consistency option ({@code v}/{@code c} position headers) as asked, a
   * consumer session a restarted instance need not wait out for long, and the record cache's
   * size when one is given ({@code --cache-max-bytes}; 0 logs every update at once). */
  static Properties properties(Common options) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, options.applicationId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrapServers);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.STATE_DIR_CONFIG, options.stateDir);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, options.commitIntervalMs);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(InteropApp.POSITION_HEADERS, options.positionHeaders);
    props.put(
        StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG),
        (int) options.sessionTimeoutMs);
    if (options.cacheMaxBytes >= 0) {
      props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, options.cacheMaxBytes);
    }
    return props;
  }

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

  /** The value of option {@code --name}; refused if it was not given. */
  static String required(Map<String, String> given, String name) {
    String value = given.get(name);
    if (value == null) {
      throw new IllegalArgumentException("--" + name + " is required");
    }
    return value;
  }

  /** The number given as {@code --name}, or {@code fallback}. */
  static long number(Map<String, String> given, String name, long fallback) {
    String value = given.get(name);
    return value == null ? fallback : Long.parseLong(value);
  }

  /** The comma-separated subset of {@code all} given as {@code --name}, in the order given;
   * all of them if it was not given. */
  static Set<String> subset(Map<String, String> given, String name, Collection<String> all) {
    String value = given.get(name);
    if (value == null) {
      return new LinkedHashSet<>(all);
    }
    Set<String> chosen = new LinkedHashSet<>(Arrays.asList(value.split(",")));
    if (!all.containsAll(chosen)) {
      throw new IllegalArgumentException(
          "--" + name + " takes a comma-separated subset of " + all + ", got " + value);
    }
    return chosen;
  }

  /** Runs {@code topology} with {@code props}: writes its description, starts it, answers
   * stdin's queries with {@code answers} (made for the running instance) until told to stop,
   * then closes it. Event lines carry {@code "at"}, the JVM's epoch milliseconds: {@code
   * topology} ({@code "text"}: {@code Topology#describe()} as Kafka Streams prints it, internal
   * topics without the application id prefix), {@code starting} right before {@code start()},
   * {@code state} changes, {@code restore-start} / {@code restore-end} per store and changelog
   * partition, {@code error}, {@code stopped}. */
  static void run(
      Topology topology, Properties props, Function<KafkaStreams, UnaryOperator<String>> answers)
      throws IOException, InterruptedException {
    KafkaStreams streams = new KafkaStreams(topology, props);
    UnaryOperator<String> answer = answers.apply(streams);
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    CountDownLatch closed = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          event(out, "\"event\":\"state\",\"state\":\"" + now + "\"");
          if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
            closed.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        exception -> {
          event(out, "\"event\":\"error\",\"message\":" + Json.string(String.valueOf(exception)));
          return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.setGlobalStateRestoreListener(restoreListener(out));
    Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(30))));
    event(out, "\"event\":\"topology\",\"text\":" + Json.string(topology.describe().toString()));
    event(out, "\"event\":\"starting\"");
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
      String reply = answer.apply(line.trim());
      synchronized (out) {
        out.println(reply);
      }
    }
    streams.close(Duration.ofSeconds(30));
    closed.await();
    event(out, "\"event\":\"stopped\"");
  }

  static void event(PrintStream out, String fields) {
    long at = System.currentTimeMillis();
    synchronized (out) {
      out.println("{" + fields + ",\"at\":" + at + "}");
    }
  }

  /** Reports Kafka Streams' restore of each store's changelog partitions as event lines. */
  static StateRestoreListener restoreListener(PrintStream out) {
    return new StateRestoreListener() {
      @Override
      public void onRestoreStart(
          TopicPartition partition, String store, long startOffset, long endOffset) {
        event(
            out,
            where("restore-start", partition, store)
                + ",\"start_offset\":" + startOffset + ",\"end_offset\":" + endOffset);
      }

      @Override
      public void onBatchRestored(
          TopicPartition partition, String store, long batchEndOffset, long numRestored) {}

      @Override
      public void onRestoreEnd(TopicPartition partition, String store, long totalRestored) {
        event(out, where("restore-end", partition, store) + ",\"restored\":" + totalRestored);
      }
    };
  }

  private static String where(String event, TopicPartition partition, String store) {
    return "\"event\":\"" + event + "\",\"store\":" + Json.string(store)
        + ",\"topic\":" + Json.string(partition.topic())
        + ",\"partition\":" + partition.partition();
  }
}
