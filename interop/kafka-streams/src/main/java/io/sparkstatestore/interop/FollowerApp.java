package io.sparkstatestore.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams application that follows changelogs another application writes: the other
 * direction of the interop tests, where spark-statestore's sink is the leader and Kafka
 * Streams the follower.
 *
 * <p>{@code --follow store=topic:format[,store=topic:format...]} names the stores, the topic
 * each one follows and its value format ({@code string}: {@code Serdes.String()}, {@code long}:
 * {@code Serdes.Long()}); keys are UTF-8 strings. {@code --kind} says how:
 *
 * <ul>
 *   <li>{@code readonly}: {@code Topology#addReadOnlyStateStore} (KIP-813), a persistent
 *       key-value store per topic whose processor puts each record (a null value deletes the
 *       key). Kafka Streams creates no changelog for it: the followed topic is its changelog,
 *       restored from up to the application's committed offsets.
 *   <li>{@code global}: {@code StreamsBuilder#globalTable(topic, Materialized.as(store))}.
 * </ul>
 *
 * <p>A topology may register a topic once only (as a source, a read-only store or a global
 * store), so one instance follows each topic one way; run the app twice to have both.
 *
 * <p>It runs exactly-once v2 (what matters here: read_committed, so it never sees the records
 * of a transaction our sink aborted). {@code --position-headers true} turns on Kafka Streams'
 * internal consistency option, under which a store restored from the topic merges the records'
 * {@code c} headers into its position. On stdin it answers queries (see {@link FollowerQueries});
 * on stdout it writes one JSON object per line ({@link Console}).
 */
public final class FollowerApp {
  private FollowerApp() {}

  /** One followed topic: the store that follows it and the serde of its values. */
  record Followed(String store, String topic, String format) {
    Serde<?> valueSerde() {
      return switch (format) {
        case "string" -> Serdes.String();
        case "long" -> Serdes.Long();
        default -> throw new IllegalArgumentException(
            "value format of " + store + " must be string or long, got " + format);
      };
    }
  }

  static Topology topology(Options options) {
    return switch (options.kind) {
      case "readonly" -> readOnlyTopology(options.followed);
      case "global" -> globalTopology(options.followed);
      default -> throw new IllegalArgumentException(
          "--kind must be readonly or global, got " + options.kind);
    };
  }

  private static Topology readOnlyTopology(List<Followed> followed) {
    Topology topology = new Topology();
    for (Followed f : followed) {
      addReadOnly(topology, f, f.valueSerde());
    }
    return topology;
  }

  private static <V> void addReadOnly(Topology topology, Followed f, Serde<V> values) {
    topology.addReadOnlyStateStore(
        Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(f.store()), Serdes.String(), values),
        f.store() + "-source",
        Serdes.String().deserializer(),
        values.deserializer(),
        f.topic(),
        f.store() + "-update",
        () -> new Update<V>(f.store()));
  }

  private static Topology globalTopology(List<Followed> followed) {
    StreamsBuilder builder = new StreamsBuilder();
    for (Followed f : followed) {
      addGlobal(builder, f, f.valueSerde());
    }
    return builder.build();
  }

  private static <V> void addGlobal(StreamsBuilder builder, Followed f, Serde<V> values) {
    builder.globalTable(
        f.topic(),
        Consumed.with(Serdes.String(), values),
        Materialized.<String, V, KeyValueStore<Bytes, byte[]>>as(f.store())
            .withKeySerde(Serdes.String())
            .withValueSerde(values));
  }

  /** Keeps a read-only store equal to its topic: a put per record, a delete per tombstone. */
  static final class Update<V> implements Processor<String, V, Void, Void> {
    private final String storeName;
    private KeyValueStore<String, V> store;

    Update(String storeName) {
      this.storeName = storeName;
    }

    @Override
    public void init(ProcessorContext<Void, Void> context) {
      store = context.getStateStore(storeName);
    }

    @Override
    public void process(Record<String, V> record) {
      if (record.value() == null) {
        store.delete(record.key());
      } else {
        store.put(record.key(), record.value());
      }
    }
  }

  static Properties properties(Options options) {
    return Console.properties(options);
  }

  public static void main(String[] args) throws Exception {
    Options options = Options.parse(args);
    Console.run(
        topology(options), properties(options), streams -> new FollowerQueries(streams)::answer);
  }

  /** The command line: {@code --name value} pairs. */
  static final class Options extends Console.Common {
    String kind;
    List<Followed> followed = new ArrayList<>();

    {
      sessionTimeoutMs = 6_000;
    }

    static final Set<String> KNOWN = Set.of(
        "bootstrap-servers", "state-dir", "application-id", "kind", "follow", "position-headers",
        "commit-interval-ms", "session-timeout-ms");

    static Options parse(String[] args) {
      Map<String, String> given = Console.options(args, KNOWN);
      Options options = new Options();
      options.readCommon(given);
      options.applicationId = Console.required(given, "application-id");
      options.kind = Console.required(given, "kind");
      for (String item : Console.required(given, "follow").split(",")) {
        String[] storeAndRest = item.split("=", 2);
        String[] topicAndFormat = storeAndRest.length == 2 ? storeAndRest[1].split(":", 2) : null;
        if (topicAndFormat == null || topicAndFormat.length != 2) {
          throw new IllegalArgumentException(
              "--follow takes store=topic:format[,...], got " + item);
        }
        Followed f = new Followed(storeAndRest[0], topicAndFormat[0], topicAndFormat[1]);
        f.valueSerde(); // refuses an unknown format now, not at the first record
        options.followed.add(f);
      }
      return options;
    }
  }
}
