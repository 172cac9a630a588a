package io.sparkstatestore.interop;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.avro.Conversions;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;

/**
 * Avro generic data as the JSON a test compares field by field: a record is an object of its
 * fields (in schema order), an enum its symbol, an array a list, a map an object (keys
 * sorted), a string a string, a long or int (a {@code timestamp-millis} too: epoch
 * milliseconds) a number, a {@code decimal} its plain decimal string, other bytes base64.
 */
final class AvroJson {
  private static final Conversions.DecimalConversion DECIMALS =
      new Conversions.DecimalConversion();

  private AvroJson() {}

  /** {@code value} (generic data, a String, a Number or null) as JSON. */
  static String of(Object value) {
    if (value instanceof GenericRecord record) {
      return of(record, record.getSchema());
    }
    return Json.value(value);
  }

  static String of(Object value, Schema schema) {
    if (value == null) {
      return "null";
    }
    switch (schema.getType()) {
      case UNION:
        return of(value, schema.getTypes().get(GenericData.get().resolveUnion(schema, value)));
      case RECORD: {
        GenericRecord record = (GenericRecord) value;
        List<String> fields = new ArrayList<>();
        for (Schema.Field field : schema.getFields()) {
          fields.add(Json.string(field.name()) + ":" + of(record.get(field.name()), field.schema()));
        }
        return "{" + String.join(",", fields) + "}";
      }
      case ARRAY: {
        List<String> items = new ArrayList<>();
        for (Object item : (Collection<?>) value) {
          items.add(of(item, schema.getElementType()));
        }
        return "[" + String.join(",", items) + "]";
      }
      case MAP: {
        Map<String, String> entries = new TreeMap<>();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
          entries.put(entry.getKey().toString(), of(entry.getValue(), schema.getValueType()));
        }
        List<String> fields = new ArrayList<>();
        entries.forEach((key, json) -> fields.add(Json.string(key) + ":" + json));
        return "{" + String.join(",", fields) + "}";
      }
      case BYTES:
        return bytes((ByteBuffer) value, schema);
      case ENUM:
      case STRING:
        return Json.string(value.toString());
      default: // INT, LONG (timestamps are epoch milliseconds), FLOAT, DOUBLE, BOOLEAN
        return value.toString();
    }
  }

  private static String bytes(ByteBuffer value, Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical instanceof LogicalTypes.Decimal) {
      BigDecimal decimal = DECIMALS.fromBytes(value.duplicate(), schema, logical);
      return Json.string(decimal.toPlainString());
    }
    ByteBuffer copy = value.duplicate();
    byte[] raw = new byte[copy.remaining()];
    copy.get(raw);
    return Json.string(Base64.getEncoder().encodeToString(raw));
  }
}
