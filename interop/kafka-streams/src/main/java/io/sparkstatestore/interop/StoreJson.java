package io.sparkstatestore.interop;

import com.google.protobuf.MessageOrBuilder;

/** A store's key or value as JSON, whatever its format: a Protobuf message as {@link
 * ProtoJson} writes it, Avro generic data (or a String, a Number, null) as {@link AvroJson}
 * does. */
final class StoreJson {
  private StoreJson() {}

  static String of(Object value) {
    return value instanceof MessageOrBuilder message ? ProtoJson.of(message) : AvroJson.of(value);
  }
}
