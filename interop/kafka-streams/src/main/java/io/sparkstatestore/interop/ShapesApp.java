package io.sparkstatestore.interop;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Topologies of several sub-topologies, the shapes users run: in each, an internal topic sits
 * between the input topics and the store, so the store's sub-topology applies an input record
 * in a later transaction than the one that committed the record's offset.
 *
 * <p>Inputs: {@code --orders-topic} (key: a customer id {@code "region:customer"} as a UTF-8
 * string; value: an amount, {@code Serdes.Long()}), {@code --labels-topic} (key: a region;
 * value: its label, a string), {@code --shipments-topic} (key: a shipment id; value: the
 * customer id it goes to) and {@code --customers-topic} (key: a customer id; value: its
 * region). The prefix of a key is its part before the first {@code ':'}, the whole key if it
 * has none. One store per shape, each selectable with {@code --shapes} (a comma-separated
 * subset, default all):
 *
 * <ul>
 *   <li>{@code regroup}: orders {@code groupBy} their prefix, counted (a key-value store behind
 *       the repartition topic {@code regroup-repartition});
 *   <li>{@code joined}: orders re-keyed by their prefix ({@code selectKey}), joined (inner) with
 *       the labels table, counted per prefix: a stream-table join after a key change, behind
 *       the join's repartition topic; orders whose prefix has no label are dropped;
 *   <li>{@code fkjoined}: the shipments table joined with the customers table by foreign key
 *       (the shipment's customer id), value {@code region + "/" + customer}: behind the
 *       join's subscription registration and response topics; a tombstone of either side
 *       deletes the joined rows;
 *   <li>{@code windowed}: orders {@code groupBy} their prefix, counted per tumbling window of
 *       {@code --window-ms} (a window store kept {@code --retention-ms}, a day by default, as
 *       {@link InteropApp} does), behind {@code windowed-repartition};
 *   <li>{@code chained}: orders re-keyed by their prefix and repartitioned through {@code
 *       hop-repartition}, re-keyed by the prefix again and counted behind {@code
 *       chained-repartition}: two repartition topics in a row.
 * </ul>
 *
 * <p>Kafka Streams names internal topics {@code <application.id>-<name>} and each store's
 * changelog {@code <application.id>-<store>-changelog}. It runs as {@link InteropApp} does
 * ({@link Console}: exactly-once v2, {@code --position-headers}, the {@code topology} event
 * with {@code Topology#describe()}), and answers {@link Queries} on stdin: {@code range} /
 * {@code trange} for the key-value stores, {@code windows} for {@code windowed}.
 */
public final class ShapesApp {
  static final String REGROUP = "regroup";
  static final String JOINED = "joined";
  static final String FKJOINED = "fkjoined";
  static final String WINDOWED = "windowed";
  static final String CHAINED = "chained";
  static final List<String> SHAPES = List.of(REGROUP, JOINED, FKJOINED, WINDOWED, CHAINED);

  private ShapesApp() {}

  /** A key's part before the first {@code ':'}, or the whole key if it has none. */
  static String prefix(String key) {
    int colon = key.indexOf(':');
    return colon < 0 ? key : key.substring(0, colon);
  }

  static Topology topology(Options options) {
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, Long> orders =
        builder.stream(options.ordersTopic, Consumed.with(Serdes.String(), Serdes.Long()));
    Grouped<String, Long> byPrefix = Grouped.with(Serdes.String(), Serdes.Long());
    if (options.shapes.contains(REGROUP)) {
      orders
          .groupBy((customer, amount) -> prefix(customer), byPrefix)
          .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(REGROUP));
    }
    if (options.shapes.contains(JOINED)) {
      KTable<String, String> labels =
          builder.table(options.labelsTopic, Consumed.with(Serdes.String(), Serdes.String()));
      orders
          .selectKey((customer, amount) -> prefix(customer))
          .join(
              labels,
              (amount, label) -> label,
              Joined.with(Serdes.String(), Serdes.Long(), Serdes.String()))
          .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
          .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(JOINED));
    }
    if (options.shapes.contains(FKJOINED)) {
      KTable<String, String> shipments =
          builder.table(options.shipmentsTopic, Consumed.with(Serdes.String(), Serdes.String()));
      KTable<String, String> customers =
          builder.table(options.customersTopic, Consumed.with(Serdes.String(), Serdes.String()));
      shipments.join(
          customers,
          customer -> customer,
          (customer, region) -> region + "/" + customer,
          Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(FKJOINED)
              .withKeySerde(Serdes.String())
              .withValueSerde(Serdes.String()));
    }
    if (options.shapes.contains(WINDOWED)) {
      orders
          .groupBy((customer, amount) -> prefix(customer), byPrefix)
          .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(options.windowMs)))
          .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(WINDOWED)
              .withRetention(Duration.ofMillis(options.retentionMs)));
    }
    if (options.shapes.contains(CHAINED)) {
      orders
          .selectKey((customer, amount) -> prefix(customer))
          .repartition(
              Repartitioned.<String, Long>as("hop")
                  .withKeySerde(Serdes.String())
                  .withValueSerde(Serdes.Long()))
          .selectKey((region, amount) -> prefix(region))
          .groupByKey(byPrefix)
          .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(CHAINED));
    }
    return builder.build();
  }

  public static void main(String[] args) throws Exception {
    Options options = Options.parse(args);
    Console.run(
        topology(options), Console.properties(options), streams -> new Queries(streams)::answer);
  }

  /** The command line: {@code --name value} pairs. */
  static final class Options extends Console.Common {
    String ordersTopic = "orders";
    String labelsTopic = "labels";
    String shipmentsTopic = "shipments";
    String customersTopic = "customers";
    long windowMs = 60_000;
    long retentionMs = 86_400_000; // of the window store: windows older expire
    Set<String> shapes;

    {
      applicationId = "interop-shapes";
      positionHeaders = true;
      sessionTimeoutMs = 45_000;
    }

    static final Set<String> KNOWN = Set.of(
        "bootstrap-servers", "state-dir", "application-id", "position-headers",
        "commit-interval-ms", "session-timeout-ms", "cache-max-bytes", "orders-topic", "labels-topic",
        "shipments-topic", "customers-topic", "window-ms", "retention-ms", "shapes");

    static Options parse(String[] args) {
      Map<String, String> given = Console.options(args, KNOWN);
      Options options = new Options();
      options.readCommon(given);
      options.ordersTopic = given.getOrDefault("orders-topic", options.ordersTopic);
      options.labelsTopic = given.getOrDefault("labels-topic", options.labelsTopic);
      options.shipmentsTopic = given.getOrDefault("shipments-topic", options.shipmentsTopic);
      options.customersTopic = given.getOrDefault("customers-topic", options.customersTopic);
      options.windowMs = Console.number(given, "window-ms", options.windowMs);
      options.retentionMs = Console.number(given, "retention-ms", options.retentionMs);
      options.shapes = Console.subset(given, "shapes", SHAPES);
      return options;
    }
  }
}
