package io.sparkstatestore.interop;

import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.MessageOrBuilder;

/**
 * A Protobuf message as the JSON a test compares field by field, read through its descriptor
 * (a generated message or a {@code DynamicMessage} alike): an object of every field of the
 * message type, in declaration order, keyed by the field's proto name ({@code last_amount},
 * not the JSON name {@code lastAmount}).
 *
 * <ul>
 *   <li>A field without presence (a proto3 scalar, enum, string or bytes) is always there, its
 *       default when not set; a field with presence that is not set (an {@code optional}
 *       field, a message field, a member of a oneof: every member is a key, the ones not set
 *       null) is null.
 *   <li>Integers are numbers (unsigned ones read as unsigned), floats and doubles numbers
 *       (NaN and the infinities as the strings {@code "NaN"}, {@code "Infinity"}, {@code
 *       "-Infinity"}), bools {@code true}/{@code false}, an enum its value's name, bytes
 *       standard base64 (padded).
 *   <li>A repeated field is an array; a map field an object (keys as strings, sorted).
 *   <li>Well-known types: {@code google.protobuf.Timestamp} is epoch microseconds, {@code
 *       google.protobuf.Duration} microseconds (numbers; nanoseconds below a microsecond
 *       dropped: {@code seconds * 1e6 + nanos / 1000}); a wrapper
 *       ({@code StringValue}, {@code Int64Value}, ...) its value, or null when not set. Other
 *       messages are objects of their fields, as above.
 * </ul>
 */
final class ProtoJson {
  private static final String TIMESTAMP = "google.protobuf.Timestamp";
  private static final String DURATION = "google.protobuf.Duration";
  private static final Set<String> WRAPPERS = Set.of(
      "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
      "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
      "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue");

  private ProtoJson() {}

  /** {@code message} as a JSON object of its fields. */
  static String of(MessageOrBuilder message) {
    List<String> fields = new ArrayList<>();
    for (FieldDescriptor field : message.getDescriptorForType().getFields()) {
      fields.add(Json.string(field.getName()) + ":" + field(message, field));
    }
    return "{" + String.join(",", fields) + "}";
  }

  private static String field(MessageOrBuilder message, FieldDescriptor field) {
    if (field.isMapField()) {
      return map(message, field);
    }
    if (field.isRepeated()) {
      List<String> items = new ArrayList<>();
      for (Object item : (List<?>) message.getField(field)) {
        items.add(value(field, item));
      }
      return "[" + String.join(",", items) + "]";
    }
    if (field.hasPresence() && !message.hasField(field)) {
      return "null";
    }
    return value(field, message.getField(field));
  }

  /** A map field: its entries are messages of {@code key} and {@code value}. */
  private static String map(MessageOrBuilder message, FieldDescriptor field) {
    Descriptor entry = field.getMessageType();
    FieldDescriptor key = entry.findFieldByName("key");
    FieldDescriptor value = entry.findFieldByName("value");
    Map<String, String> entries = new TreeMap<>();
    for (Object item : (List<?>) message.getField(field)) {
      MessageOrBuilder pair = (MessageOrBuilder) item;
      entries.put(keyText(key, pair.getField(key)), value(value, pair.getField(value)));
    }
    List<String> members = new ArrayList<>();
    entries.forEach((name, json) -> members.add(Json.string(name) + ":" + json));
    return "{" + String.join(",", members) + "}";
  }

  /** A map key (a string, an integer or a bool) as the text of a JSON object's key. */
  private static String keyText(FieldDescriptor key, Object value) {
    String json = value(key, value);
    return key.getJavaType() == FieldDescriptor.JavaType.STRING ? value.toString() : json;
  }

  /** One value (not a whole repeated field) of {@code field}. */
  private static String value(FieldDescriptor field, Object value) {
    switch (field.getJavaType()) {
      case INT:
        return isUnsigned(field)
            ? Integer.toUnsignedString((Integer) value) : value.toString();
      case LONG:
        return isUnsigned(field) ? Long.toUnsignedString((Long) value) : value.toString();
      case FLOAT:
      case DOUBLE: {
        double number = ((Number) value).doubleValue();
        return Double.isFinite(number) ? value.toString() : Json.string(value.toString());
      }
      case BOOLEAN:
        return value.toString();
      case STRING:
        return Json.string((String) value);
      case BYTE_STRING:
        return Json.string(Base64.getEncoder().encodeToString(((ByteString) value).toByteArray()));
      case ENUM:
        return Json.string(((EnumValueDescriptor) value).getName());
      case MESSAGE:
        return message((MessageOrBuilder) value);
      default:
        throw new IllegalArgumentException("no JSON for field " + field.getFullName());
    }
  }

  private static boolean isUnsigned(FieldDescriptor field) {
    return switch (field.getType()) {
      case UINT32, FIXED32, UINT64, FIXED64 -> true;
      default -> false;
    };
  }

  /** A message value: a well-known type by its rule, any other message as an object. */
  private static String message(MessageOrBuilder message) {
    Descriptor type = message.getDescriptorForType();
    String name = type.getFullName();
    if (name.equals(TIMESTAMP) || name.equals(DURATION)) {
      long seconds = (Long) message.getField(type.findFieldByName("seconds"));
      int nanos = (Integer) message.getField(type.findFieldByName("nanos"));
      return Long.toString(Math.addExact(Math.multiplyExact(seconds, 1_000_000L), nanos / 1_000));
    }
    if (WRAPPERS.contains(name)) {
      FieldDescriptor value = type.findFieldByName("value");
      return value(value, message.getField(value));
    }
    return of(message);
  }
}
