package io.sparkstatestore.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.query.FailureReason;
import org.apache.kafka.streams.query.Position;
import org.apache.kafka.streams.query.PositionBound;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.RangeQuery;
import org.apache.kafka.streams.query.StateQueryRequest;
import org.apache.kafka.streams.query.StateQueryResult;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The queries of {@link FollowerApp}, one request per line, answered in {@link Queries}' JSON
 * shape:
 *
 * <ul>
 *   <li>{@code <id> range <store> <waitMs> [<bound>]}: {@code KafkaStreams#query} with
 *       {@code RangeQuery.withNoBounds()} over every partition, and, when a bound is given,
 *       {@code PositionBound.at(bound)}; {@code <bound>} is {@code topic:partition:offset} items
 *       joined by commas. While a partition answers {@code NOT_UP_TO_BOUND} the query is asked
 *       again until {@code waitMs} have passed (Kafka Streams has no way to wait for a position,
 *       so this is what a caller of IQv2 does); then the failure is the answer.
 *   <li>{@code <id> all <store>}: IQv1, {@code KafkaStreams#store(...).all()} of a key-value
 *       store (Kafka Streams 4.3 answers IQv2 on a global store with {@code
 *       UNKNOWN_QUERY_TYPE}, KAFKA-13523; IQv1 is how its global tables are read).
 * </ul>
 *
 * <p>Answers: {@code {"id", "ok": true, "rows": [{"partition", "key", "value"}], "position": {topic:
 * {partition: offset}}, "partitions": [...], "attempts": n}} (for IQv1 rows have no partition
 * and {@code position} is null: it has none), or {@code {"id", "ok": false, "failure", "partition", "message",
 * "position"}} with the store's position when the failure carries one.
 */
final class FollowerQueries {
  private static final long RETRY_MS = 5;

  private final KafkaStreams streams;

  FollowerQueries(KafkaStreams streams) {
    this.streams = streams;
  }

  String answer(String line) {
    String[] parts = line.split(" ");
    String id = parts[0];
    try {
      if (parts.length < 3) {
        throw new IllegalArgumentException("expected <id> <op> <store> ..., got " + line);
      }
      String op = parts[1];
      String store = parts[2];
      switch (op) {
        case "range":
          if (parts.length < 4 || parts.length > 5) {
            throw new IllegalArgumentException("expected <id> range <store> <waitMs> [<bound>]");
          }
          return range(id, store, Long.parseLong(parts[3]), parts.length == 5 ? parts[4] : null);
        case "all":
          return all(id, store);
        default:
          throw new IllegalArgumentException("unknown op " + op);
      }
    } catch (RuntimeException e) {
      return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":\"EXCEPTION\",\"message\":"
          + Json.string(String.valueOf(e)) + "}";
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":\"EXCEPTION\",\"message\":"
          + Json.string(String.valueOf(e)) + "}";
    }
  }

  /** {@code topic:partition:offset,...} as a Position. */
  static Position bound(String text) {
    Map<String, Map<Integer, Long>> map = new HashMap<>();
    for (String item : text.split(",")) {
      int last = item.lastIndexOf(':');
      int middle = last < 0 ? -1 : item.lastIndexOf(':', last - 1);
      if (middle <= 0) {
        throw new IllegalArgumentException("a bound is topic:partition:offset[,...], got " + text);
      }
      map.computeIfAbsent(item.substring(0, middle), t -> new HashMap<>())
          .put(Integer.parseInt(item.substring(middle + 1, last)),
              Long.parseLong(item.substring(last + 1)));
    }
    return Position.fromMap(map);
  }

  private String range(String id, String store, long waitMs, String boundText)
      throws InterruptedException {
    StateQueryRequest<KeyValueIterator<String, Object>> request =
        StateQueryRequest.inStore(store).withQuery(RangeQuery.<String, Object>withNoBounds());
    if (boundText != null) {
      request = request.withPositionBound(PositionBound.at(bound(boundText)));
    }
    long deadline = System.nanoTime() + waitMs * 1_000_000L;
    int attempts = 0;
    while (true) {
      attempts++;
      StateQueryResult<KeyValueIterator<String, Object>> result = streams.query(request);
      String failure = failure(id, result);
      if (failure == null) {
        return rows(id, result, attempts);
      }
      closeAll(result);
      if (!notUpToBound(result) || System.nanoTime() >= deadline) {
        return failure;
      }
      Thread.sleep(RETRY_MS); // a store's position moves with no notification: ask again
    }
  }

  private static boolean notUpToBound(StateQueryResult<?> result) {
    for (QueryResult<?> partition : result.getPartitionResults().values()) {
      if (partition.isFailure() && partition.getFailureReason() != FailureReason.NOT_UP_TO_BOUND) {
        return false;
      }
    }
    return result.getGlobalResult() == null;
  }

  private static <K, V> void closeAll(StateQueryResult<KeyValueIterator<K, V>> result) {
    for (QueryResult<KeyValueIterator<K, V>> partition : result.getPartitionResults().values()) {
      if (partition.isSuccess()) {
        partition.getResult().close();
      }
    }
  }

  private static <K, V> String rows(
      String id, StateQueryResult<KeyValueIterator<K, V>> result, int attempts) {
    List<String> rows = new ArrayList<>();
    for (Map.Entry<Integer, QueryResult<KeyValueIterator<K, V>>> partition
        : result.getPartitionResults().entrySet()) {
      try (KeyValueIterator<K, V> iterator = partition.getValue().getResult()) {
        while (iterator.hasNext()) {
          KeyValue<K, V> next = iterator.next();
          rows.add("{\"partition\":" + partition.getKey() + ","
              + row(String.valueOf(next.key), next.value).substring(1));
        }
      }
    }
    return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
        + "],\"position\":" + Json.position(result.getPosition()) + ",\"partitions\":"
        + new TreeSet<>(result.getPartitionResults().keySet()) + ",\"attempts\":" + attempts
        + "}";
  }

  private String all(String id, String store) {
    ReadOnlyKeyValueStore<String, Object> view =
        streams.store(StoreQueryParameters.fromNameAndType(
            store, QueryableStoreTypes.<String, Object>keyValueStore()));
    List<String> rows = new ArrayList<>();
    try (KeyValueIterator<String, Object> iterator = view.all()) {
      while (iterator.hasNext()) {
        KeyValue<String, Object> next = iterator.next();
        rows.add(row(next.key, next.value));
      }
    }
    return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
        + "],\"position\":null}";
  }

  /** The first failure of a result (a partition's, or the global one), or null. */
  private static <R> String failure(String id, StateQueryResult<R> result) {
    QueryResult<R> global = result.getGlobalResult();
    if (global != null && global.isFailure()) {
      return failed(id, null, global);
    }
    for (Map.Entry<Integer, QueryResult<R>> entry : result.getPartitionResults().entrySet()) {
      if (entry.getValue().isFailure()) {
        return failed(id, entry.getKey(), entry.getValue());
      }
    }
    return null;
  }

  private static String failed(String id, Integer partition, QueryResult<?> failed) {
    Position position = failed.getPosition();
    return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":"
        + Json.string(failed.getFailureReason().name()) + ",\"partition\":" + partition
        + ",\"message\":" + Json.string(failed.getFailureMessage()) + ",\"position\":"
        + (position == null ? "null" : Json.position(position)) + "}";
  }

  /** A value as JSON: a string or a number as {@link Json} writes it, an Avro record as an
   * object of its fields ({@link AvroJson}, by the record's own schema), a Protobuf message
   * likewise ({@link ProtoJson}); see {@link StoreJson}. */
  private static String row(String key, Object value) {
    return "{\"key\":" + Json.string(key) + ",\"value\":" + StoreJson.of(value) + "}";
  }
}
