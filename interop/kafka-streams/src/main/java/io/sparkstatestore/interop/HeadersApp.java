package io.sparkstatestore.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.TimestampedKeyValueStoreWithHeaders;
import org.apache.kafka.streams.state.TimestampedWindowStoreWithHeaders;
import org.apache.kafka.streams.state.ValueTimestampHeaders;

/**
 * Kafka Streams 4.3 header-aware stores (KIP-1271), for the interop tests of headers.
 *
 * <p>It reads the orders topic (as {@link InteropApp}: String keys, Long values, null cancels)
 * and keeps each customer's last order with its record timestamp and the input record's
 * headers in {@code headed}, a {@code TimestampedKeyValueStoreWithHeaders}
 * ({@code Stores.persistentTimestampedKeyValueStoreWithHeaders}), and each customer's last
 * order per tumbling window of {@code --window-ms} in {@code headed-windows}, a
 * {@code TimestampedWindowStoreWithHeaders} (a cancellation deletes its window); both are
 * logged to their changelogs.
 * Kafka Streams logs such a store's values as plain values and the headers as the changelog
 * record's headers ({@code ChangeLoggingTimestampedKeyValueBytesStoreWithHeaders}).
 *
 * <p>It takes {@link InteropApp}'s command line and properties (exactly-once v2, position
 * headers on or off). On stdin, {@code <id> headers headed} answers every entry of the store
 * as Kafka Streams reads it ({@code QueryableStoreTypes.timestampedKeyValueStoreWithHeaders()}):
 * {@code {"id", "ok": true, "rows": [{"key", "value", "timestamp", "headers": [{"key",
 * "value": base64 or null}]}]}}; {@code <id> window-headers headed-windows} answers every
 * window ({@code timestampedWindowStoreWithHeaders()}), its rows also with {@code "start"} and
 * {@code "end"}; {@code stop} closes it. It lives apart from
 * {@link InteropApp} so that app's stores stay as they are.
 */
public final class HeadersApp {
  static final String HEADED = "headed";
  static final String HEADED_WINDOWS = "headed-windows";

  private HeadersApp() {}

  static Topology topology(InteropApp.Options options) {
    Topology topology = new Topology();
    topology.addSource(
        "orders",
        Serdes.String().deserializer(),
        Serdes.Long().deserializer(),
        options.inputTopic);
    topology.addProcessor(
        "latest-with-headers", () -> new LatestWithHeaders(options.windowMs), "orders");
    topology.addStateStore(
        Stores.timestampedKeyValueStoreWithHeadersBuilder(
            Stores.persistentTimestampedKeyValueStoreWithHeaders(HEADED),
            Serdes.String(),
            Serdes.Long()),
        "latest-with-headers");
    topology.addStateStore(
        Stores.timestampedWindowStoreWithHeadersBuilder(
            Stores.persistentTimestampedWindowStoreWithHeaders(
                HEADED_WINDOWS,
                Duration.ofMillis(options.retentionMs),
                Duration.ofMillis(options.windowMs),
                false),
            Serdes.String(),
            Serdes.Long()),
        "latest-with-headers");
    return topology;
  }

  /** Puts each order with its timestamp and headers; a null amount deletes the customer. */
  static final class LatestWithHeaders implements Processor<String, Long, Void, Void> {
    private final long windowMs;
    private TimestampedKeyValueStoreWithHeaders<String, Long> store;
    private TimestampedWindowStoreWithHeaders<String, Long> windows;

    LatestWithHeaders(long windowMs) {
      this.windowMs = windowMs;
    }

    @Override
    public void init(ProcessorContext<Void, Void> context) {
      store = context.getStateStore(HEADED);
      windows = context.getStateStore(HEADED_WINDOWS);
    }

    @Override
    public void process(Record<String, Long> record) {
      long windowStart = record.timestamp() - record.timestamp() % windowMs;
      if (record.value() == null) {
        store.delete(record.key());
        windows.put(record.key(), null, windowStart);
      } else {
        ValueTimestampHeaders<Long> value =
            ValueTimestampHeaders.make(record.value(), record.timestamp(), record.headers());
        store.put(record.key(), value);
        windows.put(record.key(), value, windowStart);
      }
    }
  }

  static String answer(KafkaStreams streams, String line) {
    String[] parts = line.split(" ");
    String id = parts[0];
    try {
      if (parts.length != 3) {
        throw new IllegalArgumentException("expected <id> <op> <store>, got " + line);
      }
      if (parts[1].equals("window-headers")) {
        return windowRows(streams, id, parts[2]);
      }
      if (!parts[1].equals("headers")) {
        throw new IllegalArgumentException("unknown op " + parts[1]);
      }
      ReadOnlyKeyValueStore<String, ValueTimestampHeaders<Long>> store =
          streams.store(
              StoreQueryParameters.fromNameAndType(
                  parts[2], QueryableStoreTypes.<String, Long>timestampedKeyValueStoreWithHeaders()));
      List<String> rows = new ArrayList<>();
      try (KeyValueIterator<String, ValueTimestampHeaders<Long>> all = store.all()) {
        while (all.hasNext()) {
          KeyValue<String, ValueTimestampHeaders<Long>> next = all.next();
          rows.add(row(next.key, next.value));
        }
      }
      return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
          + "]}";
    } catch (RuntimeException e) {
      return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":\"EXCEPTION\",\"message\":"
          + Json.string(String.valueOf(e)) + "}";
    }
  }

  private static String windowRows(KafkaStreams streams, String id, String name) {
    ReadOnlyWindowStore<String, ValueTimestampHeaders<Long>> store =
        streams.store(
            StoreQueryParameters.fromNameAndType(
                name, QueryableStoreTypes.<String, Long>timestampedWindowStoreWithHeaders()));
    List<String> rows = new ArrayList<>();
    try (KeyValueIterator<Windowed<String>, ValueTimestampHeaders<Long>> all = store.all()) {
      while (all.hasNext()) {
        KeyValue<Windowed<String>, ValueTimestampHeaders<Long>> next = all.next();
        String row = row(next.key.key(), next.value);
        rows.add("{\"start\":" + next.key.window().start() + ",\"end\":"
            + next.key.window().end() + "," + row.substring(1));
      }
    }
    return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
        + "]}";
  }

  private static String row(String key, ValueTimestampHeaders<Long> value) {
    List<String> headers = new ArrayList<>();
    for (Header header : value.headers()) {
      String bytes =
          header.value() == null
              ? "null"
              : Json.string(Base64.getEncoder().encodeToString(header.value()));
      headers.add("{\"key\":" + Json.string(header.key()) + ",\"value\":" + bytes + "}");
    }
    return "{\"key\":" + Json.string(key) + ",\"value\":" + Json.value(value.value())
        + ",\"timestamp\":" + value.timestamp() + ",\"headers\":[" + String.join(",", headers)
        + "]}";
  }

  public static void main(String[] args) throws Exception {
    InteropApp.Options options = InteropApp.Options.parse(args);
    Console.run(
        topology(options),
        InteropApp.properties(options),
        streams -> line -> answer(streams, line));
  }
}
