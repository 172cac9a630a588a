package io.sparkstatestore.interop;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Duration;
import com.google.protobuf.Message;
import com.google.protobuf.MessageOrBuilder;
import com.google.protobuf.StringValue;
import com.google.protobuf.Timestamp;
import com.google.protobuf.UnknownFieldSet;
import com.google.protobuf.util.Durations;
import com.google.protobuf.util.Timestamps;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * {@link RegistryApp}'s {@code orders-proto} store: folds each order into the customer's
 * Protobuf {@code sparkstatestore.interop.CustomerOrders} (the rules: RegistryApp's Javadoc).
 *
 * <p>One fold for both schema versions: it reads and writes the message through its
 * descriptor (the classes protoc generates for the two versions share no Java type), and sets
 * {@code note} or {@code region} only where the version has the field, as the Avro fold does
 * with its schema's fields. The store's serde reads every value as this version's class.
 */
final class ProtoOrders implements Processor<String, Long, Void, Void> {
  private final Message prototype;
  private final Descriptor type;
  private KeyValueStore<String, Message> orders;

  /** {@code prototype}: the default instance of the schema version's generated class. */
  ProtoOrders(Message prototype) {
    this.prototype = prototype;
    this.type = prototype.getDescriptorForType();
  }

  @Override
  public void init(ProcessorContext<Void, Void> context) {
    orders = context.getStateStore(RegistryApp.ORDERS_PROTO);
  }

  @Override
  public void process(Record<String, Long> record) {
    String customer = record.key();
    Message previous = orders.get(customer);
    Long amount = record.value();
    if (amount == null) {
      if (previous == null) {
        return;
      }
      if (get(previous, "status").equals(status("CLOSED"))) {
        orders.delete(customer);
      } else {
        orders.put(customer, closed(previous, record.timestamp()));
      }
      return;
    }
    orders.put(customer, ordered(customer, previous, amount, record.timestamp()));
  }

  private Message ordered(String customer, Message previous, long amount, long timestamp) {
    long total = amount + (previous == null ? 0L : (Long) get(previous, "total"));
    int count = 1 + (previous == null ? 0 : (Integer) get(previous, "count"));
    List<Long> amounts = new ArrayList<>();
    if (previous != null) {
      for (Object item : (List<?>) get(previous, "amounts")) {
        amounts.add((Long) item);
      }
    }
    amounts.add(amount);
    if (amounts.size() > RegistryApp.LAST_AMOUNTS) {
      amounts = amounts.subList(amounts.size() - RegistryApp.LAST_AMOUNTS, amounts.size());
    }
    Map<String, Long> tags = previous == null ? new TreeMap<>() : tags(previous);
    tags.merge(amount < 100 ? "small" : amount < 500 ? "medium" : "large", 1L, Long::sum);
    long maxAmount = amount;
    long first = timestamp;
    if (previous != null) {
      MessageOrBuilder stats = (MessageOrBuilder) get(previous, "stats");
      maxAmount = Math.max(amount, Integer.toUnsignedLong((Integer) get(stats, "max_amount")));
      first = firstOrder(previous);
    }

    Message.Builder next = prototype.newBuilderForType();
    set(next, "customer", customer);
    set(next, "total", total);
    set(next, "count", count);
    set(next, "last_amount", amount);
    set(next, "updated", Timestamps.fromMillis(timestamp));
    for (Long item : amounts) {
      next.addRepeatedField(field("amounts"), item);
    }
    FieldDescriptor tagsField = field("tags");
    Descriptor entry = tagsField.getMessageType();
    tags.forEach((tag, number) -> next.addRepeatedField(tagsField,
        next.newBuilderForField(tagsField)
            .setField(entry.findFieldByName("key"), tag)
            .setField(entry.findFieldByName("value"), number)
            .build()));
    set(next, "status", status("OPEN"));
    if (type.findFieldByName("note") != null && amount >= 900) {
      set(next, "note", StringValue.of("large order " + amount));
    }
    FieldDescriptor statsField = field("stats");
    Descriptor stats = statsField.getMessageType();
    next.setField(statsField, next.newBuilderForField(statsField)
        .setField(stats.findFieldByName("mean"), (double) total / count)
        .setField(stats.findFieldByName("max_amount"), (int) maxAmount) // uint32
        .setField(stats.findFieldByName("digest"),
            ByteString.copyFrom(ByteBuffer.allocate(Integer.BYTES).putInt(count).array()))
        .build());
    set(next, "since_first", Durations.fromMillis(timestamp - first));
    if (amount % 2 == 0) {
      set(next, "channel", "web");
    }
    set(next, "last_positive", amount);
    if (type.findFieldByName("region") != null) {
      set(next, "region", amount % 2 == 0 ? "even" : "odd");
    }
    return next.build();
  }

  /** {@code previous} CLOSED at {@code timestamp}: its other fields kept, the fields of the
   * other schema version it may carry (unknown fields here) dropped, as the Avro fold
   * rewrites a record with its own schema. */
  private Message closed(Message previous, long timestamp) {
    Message.Builder next = previous.toBuilder();
    next.setUnknownFields(UnknownFieldSet.getDefaultInstance());
    set(next, "status", status("CLOSED"));
    set(next, "updated", Timestamps.fromMillis(timestamp));
    set(next, "since_first", Durations.fromMillis(timestamp - firstOrder(previous)));
    if (type.findFieldByName("note") != null) {
      set(next, "note", StringValue.of("cancelled"));
    }
    set(next, "last_cancel_reason", "cancel");
    return next.build();
  }

  /** The timestamp of the customer's first order: {@code updated - since_first}. */
  private long firstOrder(Message previous) {
    return Timestamps.toMillis((Timestamp) get(previous, "updated"))
        - Durations.toMillis((Duration) get(previous, "since_first"));
  }

  private static Map<String, Long> tags(Message previous) {
    Map<String, Long> tags = new TreeMap<>();
    for (Object item : (List<?>) get(previous, "tags")) {
      MessageOrBuilder pair = (MessageOrBuilder) item;
      tags.put((String) get(pair, "key"), (Long) get(pair, "value"));
    }
    return tags;
  }

  private Object status(String name) {
    return field("status").getEnumType().findValueByName(name);
  }

  /** The field {@code name} of this version's message; refused if it has none. */
  private FieldDescriptor field(String name) {
    FieldDescriptor field = type.findFieldByName(name);
    if (field == null) {
      throw new IllegalArgumentException(type.getFullName() + " has no field " + name);
    }
    return field;
  }

  private void set(Message.Builder builder, String name, Object value) {
    builder.setField(field(name), value);
  }

  private static Object get(MessageOrBuilder message, String name) {
    return message.getField(message.getDescriptorForType().findFieldByName(name));
  }
}
