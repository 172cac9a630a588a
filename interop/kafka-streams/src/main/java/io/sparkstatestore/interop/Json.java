package io.sparkstatestore.interop;

import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.streams.query.Position;

/** The little JSON the app writes: strings, numbers, null, and positions. */
final class Json {
  private Json() {}

  static String string(String text) {
    if (text == null) {
      return "null";
    }
    StringBuilder out = new StringBuilder("\"");
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  static String value(Object value) {
    if (value == null) {
      return "null";
    }
    if (value instanceof Number) {
      return value.toString();
    }
    return string(value.toString());
  }

  /** {@code {"topic": {"partition": offset}}}, topics and partitions sorted. */
  static String position(Position position) {
    StringBuilder out = new StringBuilder("{");
    String topicSeparator = "";
    for (String topic : new java.util.TreeSet<>(position.getTopics())) {
      out.append(topicSeparator).append(string(topic)).append(":{");
      topicSeparator = ",";
      String partitionSeparator = "";
      Map<Integer, Long> partitions = new TreeMap<>(position.getPartitionPositions(topic));
      for (Map.Entry<Integer, Long> entry : partitions.entrySet()) {
        out.append(partitionSeparator)
            .append('"')
            .append(entry.getKey())
            .append("\":")
            .append(entry.getValue());
        partitionSeparator = ",";
      }
      out.append('}');
    }
    return out.append('}').toString();
  }
}
