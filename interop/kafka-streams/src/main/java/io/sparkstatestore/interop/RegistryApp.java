package io.sparkstatestore.interop;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.google.protobuf.Message;
import io.apicurio.registry.serde.avro.AvroSerde;
import io.apicurio.registry.serde.config.SerdeConfig;
import org.apache.avro.Conversions;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.RangeQuery;
import org.apache.kafka.streams.query.StateQueryRequest;
import org.apache.kafka.streams.query.StateQueryResult;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Stores whose keys or values are Avro records or Protobuf messages written through a schema
 * registry, for the interop tests of registry-framed changelogs (issue 37).
 *
 * <p>It reads the orders topic (as {@link InteropApp}: String keys = customer, Long values =
 * amount, null cancels) and keeps three key-value stores, logged to their changelogs:
 *
 * <ul>
 *   <li>{@code orders-avro}: per customer, a {@code io.sparkstatestore.interop.CustomerOrders}
 *       record: {@code customer}, {@code total} and {@code count} of the orders,
 *       {@code last_amount}, {@code updated} (the last record's timestamp, a {@code
 *       timestamp-millis}), {@code amounts} (the last three), {@code tags} (orders per size:
 *       {@code small} under 100, {@code medium} under 500, {@code large}), {@code status}
 *       (an enum: {@code OPEN}, {@code CLOSED} after a cancellation), {@code price} (the
 *       mean amount, a {@code decimal(9,2)} rounded half-even), and in schema version 1
 *       {@code note} ({@code "large order <amount>"} for amounts of 900 and more, {@code
 *       "cancelled"} after a cancellation, else null); schema version 2 drops {@code note}
 *       and adds {@code region} (default {@code "none"}; {@code "even"} or {@code "odd"}, the
 *       parity of the last amount). A cancellation of a CLOSED customer deletes it.
 *   <li>{@code avro-keyed}: keyed by a {@code io.sparkstatestore.interop.CustomerKey} record
 *       ({@code customer}, {@code bucket}: the amount modulo 4), the sum of the customer's
 *       amounts in that bucket (a Long); a cancellation deletes the bucket of the customer's
 *       last amount.
 *   <li>{@code orders-proto}: per customer, a Protobuf {@code
 *       sparkstatestore.interop.CustomerOrders} (proto3; {@code src/main/proto}, one file per
 *       schema version, the same full name in both): {@code customer}, {@code total} (int64)
 *       and {@code count} (int32) of the orders, {@code last_amount} (sint64), {@code updated}
 *       (a {@code google.protobuf.Timestamp}: the last record's timestamp), {@code amounts}
 *       (repeated int64: the last three), {@code tags} ({@code map<string, int64>}: orders per
 *       size, as above), {@code status} (enum {@code Status}: {@code OPEN}, {@code CLOSED}
 *       after a cancellation), {@code stats} (a nested {@code Stats}: {@code mean}, a double,
 *       total / count; {@code max_amount}, a uint32, the largest amount; {@code digest}, bytes,
 *       the count as 4 big-endian bytes), {@code since_first} (a {@code
 *       google.protobuf.Duration}: {@code updated} minus the first order's timestamp), {@code
 *       channel} (proto3 {@code optional string}: {@code "web"} after an even amount, unset
 *       after an odd one), the oneof {@code last} ({@code last_positive}, int64 = 20: the
 *       amount after an order; {@code last_cancel_reason}, string = 21: {@code "cancel"} after
 *       a cancellation), and in schema version 1 {@code note} (a {@code
 *       google.protobuf.StringValue} = 9, set as {@code orders-avro}'s {@code note}, unset
 *       where that is null); schema version 2 reserves 9 and {@code "note"} and adds {@code
 *       region} (string = 13: {@code "even"} or {@code "odd"}, the parity of the last amount).
 *       A cancellation keeps the other fields ({@code stats}, {@code channel}, {@code
 *       region}, ...) and sets {@code updated}, {@code since_first}, {@code status}, {@code
 *       note} and {@code last}; a cancellation of a CLOSED customer deletes it.
 * </ul>
 *
 * <p>The Avro serde is Apicurio Registry's ({@code AvroSerde}) with its defaults: the
 * Confluent frame (magic byte 0, the 4-byte big-endian content id, the binary payload), no
 * headers, {@code TopicIdStrategy}. Kafka Streams serializes a store's keys and values with
 * its changelog's name, so the schemas are registered (auto-register, in the default group)
 * as {@code <application id>-orders-avro-changelog-value} and {@code <application
 * id>-avro-keyed-changelog-key}, the subjects the registry's Confluent-compatible API lists.
 *
 * <p>The Protobuf serde is Apicurio Registry's too ({@link ProtobufSerdes#forClass}), in the
 * Confluent frame with message indexes: magic byte 0, the 4-byte big-endian content id, the
 * indexes ({@code [0]}, written by Apicurio as the bytes {@code 02 00}), the message; no
 * type-ref prefix, no headers. It registers {@code <application id>-orders-proto-changelog-value}
 * as the {@code .proto} text the version's class was compiled from, referencing the
 * well-known types it imports, which it registers as {@code google/protobuf/timestamp.proto},
 * {@code google/protobuf/duration.proto} and (version 1) {@code
 * google/protobuf/wrappers.proto}.
 *
 * <p>It takes {@link InteropApp}'s command line and properties (exactly-once v2), plus
 * {@code --schema-registry-url}, Apicurio Registry's own API ({@code .../apis/registry/v3};
 * required), and {@code --schema-version} ({@code 1}, the default, or {@code 2}): the value
 * schema it writes, registered on first use. Avro records already in the store written with
 * the other version are read with their own schema and rewritten with this one when updated.
 * Protobuf values are read as this version's class whichever version wrote them (Protobuf's
 * rule: a version 1 message read by version 2 has {@code region} {@code ""} and {@code note}
 * as an unknown field, which an update drops; a version 2 message read by version 1 has
 * {@code note} unset).
 *
 * <p>On stdin, {@code <id> records <store>} answers every entry of a store through IQv2
 * ({@code RangeQuery.withNoBounds()}): {@code {"id", "ok": true, "rows": [{"key", "value"}],
 * "position"}}, an Avro key or value as a JSON object of its fields ({@link AvroJson}:
 * timestamps in epoch milliseconds, decimals as strings, enums as their symbols), a Protobuf
 * value likewise ({@link ProtoJson}: proto field names, every field of the message, Timestamp
 * and Duration in microseconds, unset optional, message and oneof fields null, bytes base64);
 * {@code stop} closes it.
 */
public final class RegistryApp {
  static final String ORDERS_AVRO = "orders-avro";
  static final String AVRO_KEYED = "avro-keyed";
  static final String ORDERS_PROTO = "orders-proto";
  static final int BUCKETS = 4;
  static final int LAST_AMOUNTS = 3;

  /** Version 1 of the value schema. */
  static final Schema VALUE_V1 = new Schema.Parser().parse("""
      {"type": "record", "name": "CustomerOrders", "namespace": "io.sparkstatestore.interop",
       "fields": [
         {"name": "customer", "type": "string"},
         {"name": "total", "type": "long"},
         {"name": "count", "type": "int"},
         {"name": "last_amount", "type": "long"},
         {"name": "note", "type": ["null", "string"], "default": null},
         {"name": "updated", "type": {"type": "long", "logicalType": "timestamp-millis"}},
         {"name": "amounts", "type": {"type": "array", "items": "long"}},
         {"name": "tags", "type": {"type": "map", "values": "long"}},
         {"name": "status",
          "type": {"type": "enum", "name": "Status", "symbols": ["OPEN", "CLOSED"]}},
         {"name": "price",
          "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}
       ]}
      """);

  /** Version 2: {@code note} dropped, {@code region} added with a default (compatible both
   * ways: each version's readers read the other's records). */
  static final Schema VALUE_V2 = new Schema.Parser().parse("""
      {"type": "record", "name": "CustomerOrders", "namespace": "io.sparkstatestore.interop",
       "fields": [
         {"name": "customer", "type": "string"},
         {"name": "total", "type": "long"},
         {"name": "count", "type": "int"},
         {"name": "last_amount", "type": "long"},
         {"name": "updated", "type": {"type": "long", "logicalType": "timestamp-millis"}},
         {"name": "amounts", "type": {"type": "array", "items": "long"}},
         {"name": "tags", "type": {"type": "map", "values": "long"}},
         {"name": "status",
          "type": {"type": "enum", "name": "Status", "symbols": ["OPEN", "CLOSED"]}},
         {"name": "price",
          "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
         {"name": "region", "type": "string", "default": "none"}
       ]}
      """);

  static final Schema KEY_SCHEMA = new Schema.Parser().parse("""
      {"type": "record", "name": "CustomerKey", "namespace": "io.sparkstatestore.interop",
       "fields": [{"name": "customer", "type": "string"}, {"name": "bucket", "type": "int"}]}
      """);

  private RegistryApp() {}

  /** The value schema of {@code version} (1 or 2). */
  static Schema valueSchema(int version) {
    return switch (version) {
      case 1 -> VALUE_V1;
      case 2 -> VALUE_V2;
      default -> throw new IllegalArgumentException(
          "--schema-version must be 1 or 2, got " + version);
    };
  }

  /** The default instance of the Protobuf value class of {@code version} (1 or 2). */
  static Message protoPrototype(int version) {
    return switch (version) {
      case 1 -> io.sparkstatestore.interop.proto.v1.CustomerOrders.getDefaultInstance();
      case 2 -> io.sparkstatestore.interop.proto.v2.CustomerOrders.getDefaultInstance();
      default -> throw new IllegalArgumentException(
          "--schema-version must be 1 or 2, got " + version);
    };
  }

  /** Apicurio's Avro serde in the Confluent frame, registering the schemas it writes. */
  static Serde<GenericRecord> avroSerde(String registryUrl, boolean isKey) {
    Map<String, Object> config = new HashMap<>();
    config.put(SerdeConfig.REGISTRY_URL, registryUrl);
    config.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, true);
    AvroSerde<GenericRecord> serde = new AvroSerde<>();
    serde.configure(config, isKey);
    return serde;
  }

  static Topology topology(
      Options options,
      Serde<GenericRecord> keys,
      Serde<GenericRecord> values,
      Serde<Message> protos) {
    Topology topology = new Topology();
    topology.addSource(
        "orders",
        Serdes.String().deserializer(),
        Serdes.Long().deserializer(),
        options.app.inputTopic);
    Schema schema = valueSchema(options.schemaVersion);
    topology.addProcessor("customer-orders", () -> new CustomerOrders(schema), "orders");
    topology.addStateStore(
        Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(ORDERS_AVRO), Serdes.String(), values),
        "customer-orders");
    topology.addStateStore(
        Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(AVRO_KEYED), keys, Serdes.Long()),
        "customer-orders");
    Message prototype = protoPrototype(options.schemaVersion);
    topology.addProcessor(
        "customer-orders-proto", () -> new ProtoOrders(prototype), "orders");
    topology.addStateStore(
        Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(ORDERS_PROTO), Serdes.String(), protos),
        "customer-orders-proto");
    return topology;
  }

  /** Folds each order into the customer's {@code CustomerOrders} and bucket sums. */
  static final class CustomerOrders implements Processor<String, Long, Void, Void> {
    private static final Conversions.DecimalConversion DECIMALS =
        new Conversions.DecimalConversion();
    private final Schema schema;
    private KeyValueStore<String, GenericRecord> orders;
    private KeyValueStore<GenericRecord, Long> buckets;

    CustomerOrders(Schema schema) {
      this.schema = schema;
    }

    @Override
    public void init(ProcessorContext<Void, Void> context) {
      orders = context.getStateStore(ORDERS_AVRO);
      buckets = context.getStateStore(AVRO_KEYED);
    }

    @Override
    public void process(Record<String, Long> record) {
      String customer = record.key();
      GenericRecord previous = orders.get(customer);
      Long amount = record.value();
      if (amount == null) {
        if (previous == null) {
          return;
        }
        buckets.delete(bucketKey(customer, (Long) previous.get("last_amount")));
        if (previous.get("status").toString().equals("CLOSED")) {
          orders.delete(customer);
        } else {
          orders.put(customer, closed(previous, record.timestamp()));
        }
        return;
      }
      GenericRecord bucket = bucketKey(customer, amount);
      Long sum = buckets.get(bucket);
      buckets.put(bucket, (sum == null ? 0L : sum) + amount);
      orders.put(customer, ordered(customer, previous, amount, record.timestamp()));
    }

    private GenericRecord ordered(
        String customer, GenericRecord previous, long amount, long timestamp) {
      long total = amount + (previous == null ? 0L : (Long) previous.get("total"));
      int count = 1 + (previous == null ? 0 : (Integer) previous.get("count"));
      List<Long> amounts = previous == null ? new ArrayList<>() : longs(previous.get("amounts"));
      amounts.add(amount);
      if (amounts.size() > LAST_AMOUNTS) {
        amounts = new ArrayList<>(amounts.subList(amounts.size() - LAST_AMOUNTS, amounts.size()));
      }
      Map<String, Long> tags = previous == null ? new TreeMap<>() : tags(previous.get("tags"));
      tags.merge(amount < 100 ? "small" : amount < 500 ? "medium" : "large", 1L, Long::sum);
      GenericRecord next = new GenericData.Record(schema);
      next.put("customer", customer);
      next.put("total", total);
      next.put("count", count);
      next.put("last_amount", amount);
      next.put("updated", timestamp);
      next.put("amounts", amounts);
      next.put("tags", tags);
      next.put("status", symbol("OPEN"));
      BigDecimal mean =
          BigDecimal.valueOf(total).divide(BigDecimal.valueOf(count), 2, RoundingMode.HALF_EVEN);
      Schema price = schema.getField("price").schema();
      next.put("price", DECIMALS.toBytes(mean, price, price.getLogicalType()));
      if (schema.getField("note") != null) {
        next.put("note", amount >= 900 ? "large order " + amount : null);
      }
      if (schema.getField("region") != null) {
        next.put("region", amount % 2 == 0 ? "even" : "odd");
      }
      return next;
    }

    /** {@code previous} CLOSED (re-written with this app's schema), its time {@code now}. */
    private GenericRecord closed(GenericRecord previous, long timestamp) {
      GenericRecord next = new GenericData.Record(schema);
      for (Schema.Field field : schema.getFields()) {
        Schema.Field old = previous.getSchema().getField(field.name());
        if (old != null) {
          next.put(field.name(), previous.get(field.name()));
        } else {
          next.put(field.name(), GenericData.get().getDefaultValue(field));
        }
      }
      next.put("amounts", longs(previous.get("amounts")));
      next.put("tags", tags(previous.get("tags")));
      next.put("status", symbol("CLOSED"));
      next.put("updated", timestamp);
      if (schema.getField("note") != null) {
        next.put("note", "cancelled");
      }
      return next;
    }

    private GenericData.EnumSymbol symbol(String name) {
      return new GenericData.EnumSymbol(schema.getField("status").schema(), name);
    }

    private static GenericRecord bucketKey(String customer, long amount) {
      GenericRecord key = new GenericData.Record(KEY_SCHEMA);
      key.put("customer", customer);
      key.put("bucket", (int) (amount % BUCKETS));
      return key;
    }

    private static List<Long> longs(Object array) {
      List<Long> out = new ArrayList<>();
      for (Object item : (List<?>) array) {
        out.add((Long) item);
      }
      return out;
    }

    /** A map read back from Avro (its keys are {@code Utf8}) with String keys. */
    private static Map<String, Long> tags(Object map) {
      Map<String, Long> out = new TreeMap<>();
      for (Map.Entry<?, ?> entry : ((Map<?, ?>) map).entrySet()) {
        out.put(entry.getKey().toString(), (Long) entry.getValue());
      }
      return out;
    }
  }

  static String answer(KafkaStreams streams, String line) {
    String[] parts = line.split(" ");
    String id = parts[0];
    try {
      if (parts.length != 3 || !parts[1].equals("records")) {
        throw new IllegalArgumentException("expected <id> records <store>, got " + line);
      }
      StateQueryResult<KeyValueIterator<Object, Object>> result =
          streams.query(
              StateQueryRequest.inStore(parts[2]).withQuery(RangeQuery.withNoBounds()));
      List<String> rows = new ArrayList<>();
      for (Map.Entry<Integer, QueryResult<KeyValueIterator<Object, Object>>> partition :
          result.getPartitionResults().entrySet()) {
        QueryResult<KeyValueIterator<Object, Object>> answer = partition.getValue();
        if (answer.isFailure()) {
          return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":"
              + Json.string(answer.getFailureReason().name()) + ",\"partition\":"
              + partition.getKey() + ",\"message\":" + Json.string(answer.getFailureMessage())
              + "}";
        }
        try (KeyValueIterator<Object, Object> all = answer.getResult()) {
          while (all.hasNext()) {
            KeyValue<Object, Object> next = all.next();
            rows.add("{\"key\":" + StoreJson.of(next.key) + ",\"value\":"
                + StoreJson.of(next.value) + "}");
          }
        }
      }
      return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
          + "],\"position\":" + Json.position(result.getPosition()) + "}";
    } catch (RuntimeException e) {
      return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":\"EXCEPTION\",\"message\":"
          + Json.string(String.valueOf(e)) + "}";
    }
  }

  /** {@link InteropApp}'s command line plus the registry's. */
  static final class Options {
    InteropApp.Options app;
    String registryUrl;
    int schemaVersion = 1;

    static Options parse(String[] args) {
      Options options = new Options();
      options.app = InteropApp.Options.parse(args); // checks the --name value pairs
      Map<String, String> given = new HashMap<>();
      for (int i = 0; i + 1 < args.length; i += 2) {
        given.put(args[i].substring(2), args[i + 1]);
      }
      options.registryUrl = Console.required(given, "schema-registry-url");
      options.schemaVersion = (int) Console.number(given, "schema-version", options.schemaVersion);
      valueSchema(options.schemaVersion); // refuses another version
      return options;
    }
  }

  public static void main(String[] args) throws Exception {
    Options options = Options.parse(args);
    Serde<GenericRecord> keys = avroSerde(options.registryUrl, true);
    Serde<GenericRecord> values = avroSerde(options.registryUrl, false);
    Serde<Message> protos =
        ProtobufSerdes.forClass(options.registryUrl, protoPrototype(options.schemaVersion));
    try {
      Console.run(
          topology(options, keys, values, protos),
          InteropApp.properties(options.app),
          streams -> line -> answer(streams, line));
    } finally {
      keys.close(); // their registry clients' threads
      values.close();
      protos.close();
    }
  }
}
