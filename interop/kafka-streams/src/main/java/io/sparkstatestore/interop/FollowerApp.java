package io.sparkstatestore.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import com.google.protobuf.DynamicMessage;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import io.apicurio.registry.serde.config.IdOption;
import io.apicurio.registry.serde.config.SerdeConfig;
import org.apache.avro.generic.GenericRecord;
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
 * {@code Serdes.Long()}, {@code avro} and {@code protobuf}: see below); keys are UTF-8
 * strings. An item without {@code :format} takes {@code --value-format}'s. {@code --kind} says
 * how:
 *
 * <ul>
 *   <li>{@code readonly}: {@code Topology#addReadOnlyStateStore} (KIP-813), a persistent
 *       key-value store per topic whose processor puts each record (a null value deletes the
 *       key). Kafka Streams creates no changelog for it: the followed topic is its changelog,
 *       restored from up to the application's committed offsets.
 *   <li>{@code global}: {@code StreamsBuilder#globalTable(topic, Materialized.as(store))}.
 * </ul>
 *
 * <p>{@code avro} values are Apicurio Registry's Kafka serde for Avro generic records (its
 * {@code AvroKafkaSerializer} and {@code AvroKafkaDeserializer} as one {@code Serde}), against
 * {@code --schema-registry-url}, Apicurio's own API ({@code .../apis/registry/v3}; required with
 * {@code avro}). A value is the Confluent frame (magic byte 0, a 4-byte big-endian schema id,
 * Avro binary), as a Confluent-compatible serializer writes it; see {@link #avroValues}.
 *
 * <p>{@code protobuf} values are Apicurio Registry's Kafka serde for Protobuf, reading messages
 * of no generated class ({@code DynamicMessage}), against the same {@code
 * --schema-registry-url} (required with {@code protobuf}). A value is the Confluent frame with
 * message indexes (magic byte 0, a 4-byte big-endian schema id, the indexes, the message), the
 * message read with the writer's schema, the type its indexes name; it answers as {@link
 * ProtoJson} writes it. See {@link #protobufValues}.
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

  /** The value formats of {@code --follow} and {@code --value-format}. */
  static final Set<String> FORMATS = Set.of("string", "long", "avro", "protobuf");

  /** The value formats read through the registry (they need {@code --schema-registry-url}). */
  static final Set<String> REGISTRY_FORMATS = Set.of("avro", "protobuf");

  /** One followed topic: the store that follows it and the format of its values. */
  record Followed(String store, String topic, String format) {
    Followed {
      if (!FORMATS.contains(format)) {
        throw new IllegalArgumentException(
            "value format of " + store + " must be one of " + FORMATS + ", got " + format);
      }
    }

    /** The serde of its values; {@code registryUrl} is Apicurio's API for {@code avro} and
     * {@code protobuf}. */
    Serde<?> valueSerde(String registryUrl) {
      return switch (format) {
        case "string" -> Serdes.String();
        case "long" -> Serdes.Long();
        case "protobuf" -> protobufValues(registryUrl);
        default -> avroValues(registryUrl);
      };
    }
  }

  /**
   * Apicurio's Avro serde of generic records, as an application following a registry-framed
   * topic configures it.
   *
   * <p>Reading: the deserializer takes the frame's 4-byte id as a <em>content id</em> ({@code
   * apicurio.registry.use-id = contentId}, Apicurio 3's default, set here to say so: with
   * {@code globalId} it would look the id up among the versions' global ids), fetches that
   * content ({@code /ids/contentIds/<id>}) and reads the record with it as both writer and
   * reader schema: each record comes back with the fields of the schema it was written with.
   * The id a Confluent-compatible client gets from Apicurio's {@code /apis/ccompat/v7} (and
   * writes in its frames) is that content id.
   *
   * <p>Writing (the store keeps a value as the serializer writes it): no auto-registration;
   * the serializer finds the record's schema among the versions of {@code <topic>-value}
   * ({@code TopicIdStrategy}; for a read-only store or a global table the topic is the one
   * followed) and frames it with that version's content id. It searches by content, and the
   * record's schema prints as Avro's compact JSON while the registry keeps the text its
   * registering client sent (our sink's has spaces): {@code apicurio.registry.canonicalize}
   * compares canonical forms (without it the search fails: "Could not resolve artifact
   * reference by content").
   */
  static Serde<GenericRecord> avroValues(String registryUrl) {
    if (registryUrl == null) {
      throw new IllegalArgumentException("the avro value format needs --schema-registry-url");
    }
    Map<String, Object> config = new HashMap<>();
    config.put(SerdeConfig.REGISTRY_URL, registryUrl);
    config.put(SerdeConfig.USE_ID, IdOption.contentId.name());
    config.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, false);
    config.put(SerdeConfig.CANONICALIZE, true);
    AvroKafkaSerializer<GenericRecord> serializer = new AvroKafkaSerializer<>();
    serializer.configure(config, false);
    AvroKafkaDeserializer<GenericRecord> deserializer = new AvroKafkaDeserializer<>();
    deserializer.configure(config, false);
    return Serdes.serdeFrom(serializer, deserializer);
  }

  /**
   * Apicurio's Protobuf serde of messages of no generated class ({@code DynamicMessage}), as
   * {@link ProtobufSerdes#dynamic} configures it, against {@code registryUrl} (Apicurio's own
   * API, as for {@code avro}).
   *
   * <p>Reading: the Confluent frame (magic byte 0, a 4-byte big-endian schema id, the message
   * indexes, the message), the id looked up as a content id as for {@code avro}; the message
   * is read with the writer's schema, the message type the frame's indexes name: each value
   * answers the fields of the schema it was written with.
   *
   * <p>Writing (the store keeps a value as the serializer writes it): the same frame, with the
   * id and schema the value was read with; nothing is registered or searched.
   */
  static Serde<DynamicMessage> protobufValues(String registryUrl) {
    if (registryUrl == null) {
      throw new IllegalArgumentException(
          "the protobuf value format needs --schema-registry-url");
    }
    return ProtobufSerdes.dynamic(registryUrl);
  }

  /** The value serde of each followed store, by store name (to be closed after the run: an
   * Avro or Protobuf serde holds a registry client). */
  static Map<String, Serde<?>> valueSerdes(Options options) {
    Map<String, Serde<?>> serdes = new LinkedHashMap<>();
    for (Followed f : options.followed) {
      serdes.put(f.store(), f.valueSerde(options.registryUrl));
    }
    return serdes;
  }

  static Topology topology(Options options, Map<String, Serde<?>> values) {
    return switch (options.kind) {
      case "readonly" -> readOnlyTopology(options.followed, values);
      case "global" -> globalTopology(options.followed, values);
      default -> throw new IllegalArgumentException(
          "--kind must be readonly or global, got " + options.kind);
    };
  }

  private static Topology readOnlyTopology(List<Followed> followed, Map<String, Serde<?>> values) {
    Topology topology = new Topology();
    for (Followed f : followed) {
      addReadOnly(topology, f, values.get(f.store()));
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

  private static Topology globalTopology(List<Followed> followed, Map<String, Serde<?>> values) {
    StreamsBuilder builder = new StreamsBuilder();
    for (Followed f : followed) {
      addGlobal(builder, f, values.get(f.store()));
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
    Map<String, Serde<?>> values = valueSerdes(options);
    try {
      Console.run(
          topology(options, values),
          properties(options),
          streams -> new FollowerQueries(streams)::answer);
    } finally {
      values.values().forEach(Serde::close); // the registry clients' threads
    }
  }

  /** The command line: {@code --name value} pairs. */
  static final class Options extends Console.Common {
    String kind;
    List<Followed> followed = new ArrayList<>();
    String registryUrl;

    {
      sessionTimeoutMs = 6_000;
    }

    static final Set<String> KNOWN = Set.of(
        "bootstrap-servers", "state-dir", "application-id", "kind", "follow", "position-headers",
        "commit-interval-ms", "session-timeout-ms", "value-format", "schema-registry-url");

    static Options parse(String[] args) {
      Map<String, String> given = Console.options(args, KNOWN);
      Options options = new Options();
      options.readCommon(given);
      options.applicationId = Console.required(given, "application-id");
      options.kind = Console.required(given, "kind");
      options.registryUrl = given.get("schema-registry-url");
      String defaultFormat = given.get("value-format");
      for (String item : Console.required(given, "follow").split(",")) {
        String[] storeAndRest = item.split("=", 2);
        String[] topicAndFormat = storeAndRest.length == 2 ? storeAndRest[1].split(":", 2) : null;
        String format = topicAndFormat == null ? null
            : topicAndFormat.length == 2 ? topicAndFormat[1] : defaultFormat;
        if (format == null) {
          throw new IllegalArgumentException(
              "--follow takes store=topic:format[,...] (or store=topic with --value-format), got "
                  + item);
        }
        // Followed refuses an unknown format now, not at the first record.
        options.followed.add(new Followed(storeAndRest[0], topicAndFormat[0], format));
      }
      for (Followed f : options.followed) {
        if (options.registryUrl == null && REGISTRY_FORMATS.contains(f.format())) {
          throw new IllegalArgumentException(
              "the " + f.format() + " value format needs --schema-registry-url");
        }
      }
      return options;
    }
  }
}
