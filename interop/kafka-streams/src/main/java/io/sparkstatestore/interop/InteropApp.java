package io.sparkstatestore.interop;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams application the interop tests and the demo compare spark-statestore with.
 *
 * <p>It reads an orders topic (key: customer id as a UTF-8 string; value: the order's amount as
 * an 8-byte big-endian long, Kafka's LongSerializer; a null value cancels the customer's
 * current order) and keeps one state store of each kind Kafka Streams has:
 *
 * <ul>
 *   <li>{@code totals}, a key-value store ({@code Stores.persistentKeyValueStore}): the sum of
 *       each customer's amounts;
 *   <li>{@code latest}, a timestamped key-value store (the DSL's default): each customer's last
 *       amount, with its record timestamp;
 *   <li>{@code versions}, a versioned key-value store with a history retention: each customer's
 *       amounts over time, a cancellation ending the current version;
 *   <li>{@code counts}, a window store: orders per customer per tumbling window;
 *   <li>{@code sessions}, a session store: orders per customer per session of activity.
 * </ul>
 *
 * <p>The window and session stores keep a day of windows ({@code --retention-ms}; the DSL's
 * default would be the window size plus grace, dropping older windows from the local store
 * while their changelog still holds them).
 *
 * <p>It runs exactly-once v2. With {@code --position-headers true} it turns on Kafka Streams'
 * internal consistency option, so every changelog record carries the {@code v}/{@code c}
 * position headers. On stdin it answers Kafka Streams' own IQv2 queries, one per line (see
 * {@link Queries}); on stdout it writes one JSON object per line: state changes and answers.
 *
 * <p>Every event line carries {@code "at"}, the JVM's wall clock in epoch milliseconds:
 * {@code {"event":"starting"}} right before {@code KafkaStreams#start()}, {@code
 * {"event":"state","state":...}} at each state change, and, from Kafka Streams' own {@link
 * StateRestoreListener}, {@code {"event":"restore-start"}} / {@code {"event":"restore-end"}}
 * per store and changelog partition ({@code store}, {@code topic}, {@code partition}, {@code
 * start_offset}/{@code end_offset} or {@code restored} records), so a benchmark can time a
 * restore inside the app.
 *
 * <p>{@code --stores} (a comma-separated subset of the five names, default all) leaves the other
 * stores out of the topology, e.g. to time the restore of one store alone.
 */
public final class InteropApp {
  static final String TOTALS = "totals";
  static final String LATEST = "latest";
  static final String VERSIONS = "versions";
  static final String COUNTS = "counts";
  static final String SESSIONS = "sessions";
  static final List<String> STORES = List.of(TOTALS, LATEST, VERSIONS, COUNTS, SESSIONS);

  /** Kafka Streams' internal consistency option (StreamsConfig.InternalConfig). */
  static final String POSITION_HEADERS = "__iq.consistency.offset.vector.enabled__";

  private InteropApp() {}

  static Topology topology(Options options) {
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, Long> orders =
        builder.stream(options.inputTopic, Consumed.with(Serdes.String(), Serdes.Long()));
    KGroupedStream<String, Long> byCustomer =
        orders.groupByKey(Grouped.with(Serdes.String(), Serdes.Long()));
    if (options.stores.contains(TOTALS)) {
      byCustomer.aggregate(
          () -> 0L,
          (customer, amount, total) -> total + amount,
          Materialized.<String, Long>as(Stores.persistentKeyValueStore(TOTALS))
              .withKeySerde(Serdes.String())
              .withValueSerde(Serdes.Long()));
    }
    if (options.stores.contains(LATEST)) {
      byCustomer.reduce(
          (previous, amount) -> amount,
          Materialized.<String, Long>as(Stores.persistentTimestampedKeyValueStore(LATEST))
              .withKeySerde(Serdes.String())
              .withValueSerde(Serdes.Long()));
    }
    if (options.stores.contains(VERSIONS)) {
      orders.toTable(
          Materialized.<String, Long>as(
                  Stores.persistentVersionedKeyValueStore(
                      VERSIONS, Duration.ofMillis(options.historyRetentionMs)))
              .withKeySerde(Serdes.String())
              .withValueSerde(Serdes.Long()));
    }
    if (options.stores.contains(COUNTS)) {
      byCustomer
          .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(options.windowMs)))
          .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(COUNTS)
              .withRetention(Duration.ofMillis(options.retentionMs)));
    }
    if (options.stores.contains(SESSIONS)) {
      byCustomer
          .windowedBy(SessionWindows.ofInactivityGapWithNoGrace(Duration.ofMillis(options.sessionGapMs)))
          .count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as(SESSIONS)
              .withRetention(Duration.ofMillis(options.retentionMs)));
    }
    return builder.build();
  }

  static Properties properties(Options options) {
    return Console.properties(options);
  }

  public static void main(String[] args) throws Exception {
    Options options = Options.parse(args);
    Console.run(topology(options), properties(options), streams -> new Queries(streams)::answer);
  }

  /** The command line: {@code --name value} pairs. */
  static final class Options extends Console.Common {
    String inputTopic = "orders";
    long historyRetentionMs = 3_600_000;
    long windowMs = 60_000;
    long sessionGapMs = 30_000;
    long retentionMs = 86_400_000; // of the window and session stores: windows older expire
    Set<String> stores;

    {
      applicationId = "interop-orders";
      positionHeaders = true;
      sessionTimeoutMs = 45_000;
    }

    static Options parse(String[] args) {
      Map<String, String> given = new HashMap<>();
      for (int i = 0; i + 1 < args.length; i += 2) {
        if (!args[i].startsWith("--")) {
          throw new IllegalArgumentException("expected --name value pairs, got " + args[i]);
        }
        given.put(args[i].substring(2), args[i + 1]);
      }
      if (args.length % 2 != 0) {
        throw new IllegalArgumentException("option " + args[args.length - 1] + " has no value");
      }
      Options options = new Options();
      options.readCommon(given);
      options.inputTopic = given.getOrDefault("input-topic", options.inputTopic);
      options.historyRetentionMs =
          Console.number(given, "history-retention-ms", options.historyRetentionMs);
      options.windowMs = Console.number(given, "window-ms", options.windowMs);
      options.sessionGapMs = Console.number(given, "session-gap-ms", options.sessionGapMs);
      options.retentionMs = Console.number(given, "retention-ms", options.retentionMs);
      options.stores = Console.subset(given, "stores", STORES);
      return options;
    }
  }
}
