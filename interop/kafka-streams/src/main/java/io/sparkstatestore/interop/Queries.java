package io.sparkstatestore.interop;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.query.KeyQuery;
import org.apache.kafka.streams.query.MultiVersionedKeyQuery;
import org.apache.kafka.streams.query.Position;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.RangeQuery;
import org.apache.kafka.streams.query.StateQueryRequest;
import org.apache.kafka.streams.query.StateQueryResult;
import org.apache.kafka.streams.query.TimestampedKeyQuery;
import org.apache.kafka.streams.query.TimestampedRangeQuery;
import org.apache.kafka.streams.query.VersionedKeyQuery;
import org.apache.kafka.streams.query.WindowKeyQuery;
import org.apache.kafka.streams.query.WindowRangeQuery;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.state.VersionedRecord;
import org.apache.kafka.streams.state.VersionedRecordIterator;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * Answers Kafka Streams' own IQv2 queries, one request per line: {@code <id> <op> <store>
 * [<key>]}, where op is
 *
 * <ul>
 *   <li>{@code key}: {@code KeyQuery.withKey(key)};
 *   <li>{@code tkey}: {@code TimestampedKeyQuery.withKey(key)};
 *   <li>{@code range}: {@code RangeQuery.withNoBounds()};
 *   <li>{@code trange}: {@code TimestampedRangeQuery.withNoBounds()};
 *   <li>{@code windows}: {@code WindowRangeQuery.withWindowStartRange(epoch, far future)}, every
 *       window of a window store;
 *   <li>{@code sessions}: {@code WindowRangeQuery.withKey(key)}, a key's sessions in a session
 *       store;
 *   <li>{@code wkey <key> <from> <to>}: {@code WindowKeyQuery.withKeyAndWindowStartRange(key,
 *       from, to)}, a key's windows starting in that range (epoch milliseconds);
 *   <li>{@code vkey <key> [<asOf>]}: {@code VersionedKeyQuery.withKey(key)}, with {@code
 *       .asOf(asOf)} when given (epoch milliseconds);
 *   <li>{@code mvkey <key> <from> <to> asc|desc}: {@code
 *       MultiVersionedKeyQuery.withKey(key).fromTime(from).toTime(to)}, in that order of
 *       timestamps.
 * </ul>
 *
 * <p>Rows of versioned stores carry {@code "timestamp"} (valid from) and {@code "validTo"}
 * (null for the latest version).
 *
 * <p>Rows of window and session stores also carry {@code "start"} and {@code "end"} (epoch
 * milliseconds).
 *
 * <p>Each answer is one JSON line: {@code {"id": ..., "ok": true, "rows": [{"key", "value",
 * "timestamp"}], "position": {topic: {partition: offset}}}}, the rows of every partition that
 * answered, and the merged position; or {@code "ok": false} with the failure reason.
 */
final class Queries {
  private final KafkaStreams streams;

  Queries(KafkaStreams streams) {
    this.streams = streams;
  }

  String answer(String line) {
    String[] parts = line.split(" ");
    String id = parts[0];
    try {
      if (parts.length < 3) {
        throw new IllegalArgumentException("expected <id> <op> <store> [<key>], got " + line);
      }
      String op = parts[1];
      String store = parts[2];
      switch (op) {
        case "key":
          return rows(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(KeyQuery.<String, Object>withKey(key(parts)))), parts[3]);
        case "tkey":
          return rows(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(TimestampedKeyQuery.<String, Object>withKey(key(parts)))), parts[3]);
        case "range":
          return iterated(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(RangeQuery.<String, Object>withNoBounds())));
        case "trange":
          return iterated(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(TimestampedRangeQuery.<String, Object>withNoBounds())));
        case "windows":
          return iterated(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(WindowRangeQuery.<String, Object>withWindowStartRange(
                  Instant.EPOCH, Instant.ofEpochMilli(Long.MAX_VALUE / 2)))));
        case "sessions":
          return iterated(id, streams.query(StateQueryRequest.inStore(store)
              .withQuery(WindowRangeQuery.<String, Object>withKey(key(parts)))));
        case "wkey": {
          if (parts.length < 6) {
            throw new IllegalArgumentException("wkey needs <key> <from> <to>");
          }
          WindowKeyQuery<String, Object> query = WindowKeyQuery.withKeyAndWindowStartRange(
              key(parts),
              Instant.ofEpochMilli(Long.parseLong(parts[4])),
              Instant.ofEpochMilli(Long.parseLong(parts[5])));
          return windowsOfKey(
              id, streams.query(StateQueryRequest.inStore(store).withQuery(query)), parts[3]);
        }
        case "vkey": {
          VersionedKeyQuery<String, Object> query = VersionedKeyQuery.withKey(key(parts));
          if (parts.length > 4) {
            query = query.asOf(Instant.ofEpochMilli(Long.parseLong(parts[4])));
          }
          return versioned(id, streams.query(StateQueryRequest.inStore(store).withQuery(query)),
              parts[3]);
        }
        case "mvkey": {
          if (parts.length < 7) {
            throw new IllegalArgumentException("mvkey needs <key> <from> <to> asc|desc");
          }
          MultiVersionedKeyQuery<String, Object> query =
              MultiVersionedKeyQuery.<String, Object>withKey(key(parts))
                  .fromTime(Instant.ofEpochMilli(Long.parseLong(parts[4])))
                  .toTime(Instant.ofEpochMilli(Long.parseLong(parts[5])));
          query = parts[6].equals("asc")
              ? query.withAscendingTimestamps() : query.withDescendingTimestamps();
          return versions(id, streams.query(StateQueryRequest.inStore(store).withQuery(query)),
              parts[3]);
        }
        default:
          throw new IllegalArgumentException("unknown op " + op);
      }
    } catch (RuntimeException e) {
      return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":\"EXCEPTION\",\"message\":"
          + Json.string(String.valueOf(e)) + "}";
    }
  }

  private static String key(String[] parts) {
    if (parts.length < 4) {
      throw new IllegalArgumentException("a key query needs a key");
    }
    return parts[3];
  }

  /** A key query's answer: the row from the partition that has the key, if any. */
  private static <R> String rows(String id, StateQueryResult<R> result, String key) {
    String failure = failure(id, result);
    if (failure != null) {
      return failure;
    }
    List<String> rows = new ArrayList<>();
    for (QueryResult<R> partition : result.getPartitionResults().values()) {
      R value = partition.getResult();
      if (value != null) {
        rows.add(row(key, value));
      }
    }
    return success(id, rows, result.getPosition());
  }

  /** A window key query's answer: the key's windows by start time, from every partition. */
  private static <V> String windowsOfKey(
      String id, StateQueryResult<WindowStoreIterator<V>> result, String key) {
    String failure = failure(id, result);
    List<String> rows = new ArrayList<>();
    for (QueryResult<WindowStoreIterator<V>> partition : result.getPartitionResults().values()) {
      if (partition.isSuccess() && partition.getResult() != null) {
        try (WindowStoreIterator<V> iterator = partition.getResult()) {
          while (iterator.hasNext()) {
            KeyValue<Long, V> next = iterator.next();
            Object value = next.value instanceof ValueAndTimestamp<?> timestamped
                ? timestamped.value() : next.value;
            rows.add("{\"key\":" + Json.string(key) + ",\"start\":" + next.key
                + ",\"value\":" + Json.value(value) + "}");
          }
        }
      }
    }
    return failure != null ? failure : success(id, rows, result.getPosition());
  }

  /** A versioned key query's answer: the version from the partition that has the key. */
  private static <V> String versioned(
      String id, StateQueryResult<VersionedRecord<V>> result, String key) {
    String failure = failure(id, result);
    if (failure != null) {
      return failure;
    }
    List<String> rows = new ArrayList<>();
    for (QueryResult<VersionedRecord<V>> partition : result.getPartitionResults().values()) {
      VersionedRecord<V> record = partition.getResult();
      if (record != null) {
        rows.add(versionRow(key, record));
      }
    }
    return success(id, rows, result.getPosition());
  }

  /** A multi-versioned key query's answer: the versions in the iterator's order. */
  private static <V> String versions(
      String id, StateQueryResult<VersionedRecordIterator<V>> result, String key) {
    String failure = failure(id, result);
    List<String> rows = new ArrayList<>();
    for (QueryResult<VersionedRecordIterator<V>> partition :
        result.getPartitionResults().values()) {
      if (partition.isSuccess() && partition.getResult() != null) {
        try (VersionedRecordIterator<V> iterator = partition.getResult()) {
          while (iterator.hasNext()) {
            rows.add(versionRow(key, iterator.next()));
          }
        }
      }
    }
    return failure != null ? failure : success(id, rows, result.getPosition());
  }

  private static String versionRow(String key, VersionedRecord<?> record) {
    return "{\"key\":" + Json.string(key) + ",\"value\":" + Json.value(record.value())
        + ",\"timestamp\":" + record.timestamp() + ",\"validTo\":"
        + record.validTo().map(String::valueOf).orElse("null") + "}";
  }

  /** A range query's answer: every row of every partition (each iterator closed). */
  private static <K, V> String iterated(
      String id, StateQueryResult<KeyValueIterator<K, V>> result) {
    String failure = failure(id, result);
    List<String> rows = new ArrayList<>();
    for (QueryResult<KeyValueIterator<K, V>> partition : result.getPartitionResults().values()) {
      if (partition.isSuccess()) {
        try (KeyValueIterator<K, V> iterator = partition.getResult()) {
          while (iterator.hasNext()) {
            KeyValue<K, V> next = iterator.next();
            if (next.key instanceof Windowed<?> windowed) {
              rows.add(windowedRow(windowed, next.value));
            } else {
              rows.add(row(String.valueOf(next.key), next.value));
            }
          }
        }
      }
    }
    return failure != null ? failure : success(id, rows, result.getPosition());
  }

  private static <R> String failure(String id, StateQueryResult<R> result) {
    for (Map.Entry<Integer, QueryResult<R>> entry : result.getPartitionResults().entrySet()) {
      QueryResult<R> partition = entry.getValue();
      if (partition.isFailure()) {
        return "{\"id\":" + Json.string(id) + ",\"ok\":false,\"failure\":"
            + Json.string(partition.getFailureReason().name()) + ",\"partition\":"
            + entry.getKey() + ",\"message\":" + Json.string(partition.getFailureMessage())
            + "}";
      }
    }
    return null;
  }

  private static String row(String key, Object value) {
    if (value instanceof ValueAndTimestamp<?> timestamped) {
      return "{\"key\":" + Json.string(key) + ",\"value\":" + Json.value(timestamped.value())
          + ",\"timestamp\":" + timestamped.timestamp() + "}";
    }
    return "{\"key\":" + Json.string(key) + ",\"value\":" + Json.value(value)
        + ",\"timestamp\":null}";
  }

  private static String windowedRow(Windowed<?> windowed, Object value) {
    Object plain = value instanceof ValueAndTimestamp<?> timestamped ? timestamped.value() : value;
    String timestamp =
        value instanceof ValueAndTimestamp<?> timestamped ? "" + timestamped.timestamp() : "null";
    return "{\"key\":" + Json.string(String.valueOf(windowed.key())) + ",\"start\":"
        + windowed.window().start() + ",\"end\":" + windowed.window().end() + ",\"value\":"
        + Json.value(plain) + ",\"timestamp\":" + timestamp + "}";
  }

  private static String success(String id, List<String> rows, Position position) {
    return "{\"id\":" + Json.string(id) + ",\"ok\":true,\"rows\":[" + String.join(",", rows)
        + "],\"position\":" + Json.position(position) + "}";
  }
}
