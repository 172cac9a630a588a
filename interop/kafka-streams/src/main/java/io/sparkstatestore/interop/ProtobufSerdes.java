package io.sparkstatestore.interop;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import com.squareup.wire.schema.internal.parser.ProtoFileElement;
import com.squareup.wire.schema.internal.parser.ProtoParser;
import io.apicurio.registry.resolver.DefaultSchemaResolver;
import io.apicurio.registry.resolver.ParsedSchema;
import io.apicurio.registry.resolver.ParsedSchemaImpl;
import io.apicurio.registry.resolver.SchemaLookupResult;
import io.apicurio.registry.resolver.SchemaParser;
import io.apicurio.registry.resolver.data.Record;
import io.apicurio.registry.resolver.strategy.ArtifactReference;
import io.apicurio.registry.serde.config.IdOption;
import io.apicurio.registry.serde.config.SerdeConfig;
import io.apicurio.registry.serde.kafka.KafkaDeserializer;
import io.apicurio.registry.serde.kafka.KafkaSerializer;
import io.apicurio.registry.serde.protobuf.MessageIndexesUtil;
import io.apicurio.registry.serde.protobuf.ProtobufDeserializer;
import io.apicurio.registry.serde.protobuf.ProtobufKafkaDeserializer;
import io.apicurio.registry.serde.protobuf.ProtobufSchemaParser;
import io.apicurio.registry.serde.protobuf.ProtobufSerializer;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils.ParseSchemaException;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils.ProtobufSchemaContent;
import io.apicurio.registry.utils.protobuf.schema.ProtobufSchema;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * Apicurio Registry's Kafka serde for Protobuf ({@code apicurio-registry-protobuf-serde-kafka}
 * 3.1.7) as this jar's apps use it for store values: in the Confluent frame, with a method of
 * Apicurio's serializer or deserializer overridden where 3.1.7 falls short (each says why).
 *
 * <p>The frame: magic byte 0, the 4-byte big-endian content id (Apicurio's default id handling,
 * as for Avro: the id its Confluent-compatible API answers {@code /schemas/ids/<id>} for), the
 * message indexes ({@code apicurio.registry.serde.send-indexes}/{@code read-indexes}), the
 * message. Apicurio writes the indexes as the list's length then each index, zigzag varints:
 * {@code [0]} (the schema's first message) is the two bytes {@code 02 00}, where Confluent's
 * serializer writes the one byte {@code 00}; Confluent's reader takes both. No type-ref prefix
 * ({@code send-type-ref}/{@code read-type-ref} off: Apicurio writes one by default whenever it
 * is called without headers, as Kafka Streams calls a store's serializer) and no headers.
 */
final class ProtobufSerdes {
  private ProtobufSerdes() {}

  /** The frame's settings, both directions. */
  private static Map<String, Object> frame(String registryUrl) {
    Map<String, Object> config = new HashMap<>();
    config.put(SerdeConfig.REGISTRY_URL, registryUrl);
    config.put(SerdeConfig.USE_ID, IdOption.contentId.name());
    config.put(SerdeConfig.SEND_INDEXES, true);
    config.put(SerdeConfig.READ_INDEXES, true);
    config.put(SerdeConfig.SEND_TYPE_REF, false);
    config.put(SerdeConfig.READ_TYPE_REF, false);
    return config;
  }

  /**
   * The value serde of {@code prototype}'s generated class: the serializer registers the
   * message's schema on first use ({@code TopicIdStrategy}: {@code <topic>-value}, in the
   * default group; the well-known types it imports as artifacts named by their file, {@code
   * google/protobuf/timestamp.proto}, which the schema references) as the {@code .proto} text
   * the class was compiled from (see {@link SourceText}); the deserializer parses every value
   * as that class.
   */
  static Serde<Message> forClass(String registryUrl, Message prototype) {
    Map<String, Object> config = frame(registryUrl);
    config.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, true);
    config.put(
        SerdeConfig.DESERIALIZER_SPECIFIC_VALUE_RETURN_CLASS, prototype.getClass().getName());
    KafkaSerializer<ProtobufSchema, Message> serializer = new SourceTextSerializer();
    serializer.configure(config, false);
    ProtobufKafkaDeserializer<Message> deserializer = new ProtobufKafkaDeserializer<>();
    deserializer.configure(config, false);
    return Serdes.serdeFrom(serializer, deserializer);
  }

  /**
   * The value serde of messages of no generated class ({@code DynamicMessage}), for an app
   * following a topic others write. The deserializer reads each value with its writer's
   * schema, the message type the frame's indexes name (see {@link Dynamic}); the serializer
   * (the store keeps a value as it writes it) frames a message again with the schema it was
   * read with: no registration, no look-up (see {@link ReadSchemas}).
   */
  static Serde<DynamicMessage> dynamic(String registryUrl) {
    Map<String, Object> config = frame(registryUrl);
    config.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, false);
    // The message was parsed with the very schema it is written with: nothing to compare.
    config.put(SerdeConfig.VALIDATION_ENABLED, false);
    ReadSchemas schemas = new ReadSchemas();
    KafkaSerializer<ProtobufSchema, DynamicMessage> serializer = new Dynamic.Serializer(schemas);
    serializer.configure(config, false);
    KafkaDeserializer<ProtobufSchema, DynamicMessage> deserializer =
        new Dynamic.Deserializer(schemas);
    deserializer.configure(config, false);
    return Serdes.serdeFrom(serializer, deserializer);
  }

  /**
   * Apicurio's {@code KafkaSerializer} and {@code ProtobufSerializer}, whose schema parser
   * gives the text to register as the {@code .proto} file the message's class was compiled
   * from (protoc's plugin puts the sources on the classpath, under the file's name in the
   * descriptor) instead of the text Apicurio 3.1.7 prints from the class's descriptor: that
   * one writes a map field as a nested {@code <Name>Entry} message with {@code option
   * map_entry = true}, which protoc refuses ({@code "map_entry should not be set explicitly.
   * Use map<KeyType, ValueType> instead."}); Apicurio fixed its printer in 3.3.1. The descriptor,
   * its references and everything else are Apicurio's.
   */
  static final class SourceTextSerializer extends KafkaSerializer<ProtobufSchema, Message> {
    SourceTextSerializer() {
      super(new ProtobufSerializer<Message>() {
        private final SchemaParser<ProtobufSchema, Message> parser = new SourceText();

        @Override
        public SchemaParser<ProtobufSchema, Message> schemaParser() {
          return parser;
        }
      });
    }
  }

  /** Apicurio's Protobuf schema parser, the raw schema of a message its class's source. */
  static final class SourceText extends ProtobufSchemaParser<Message> {
    @Override
    public ParsedSchema<ProtobufSchema> getSchemaFromData(Record<Message> data) {
      ParsedSchemaImpl<ProtobufSchema> parsed =
          (ParsedSchemaImpl<ProtobufSchema>) super.getSchemaFromData(data);
      Message message = data.payload();
      String file = message.getDescriptorForType().getFile().getName();
      try (InputStream source = message.getClass().getClassLoader().getResourceAsStream(file)) {
        if (source == null) {
          throw new IllegalStateException(
              "no " + file + " on the classpath: the .proto source of " + message.getClass());
        }
        return parsed.setRawSchema(source.readAllBytes());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /**
   * The schema resolver a dynamic serde's serializer and deserializer share: Apicurio's
   * ({@code DefaultSchemaResolver}) for the deserializer's look-ups by id, parsing with {@link
   * FileParser}, each schema it resolved kept by its file descriptor, the one the messages read
   * with it carry; the serializer's {@code resolveSchema} answers that schema (content id and
   * all) for a message. Apicurio's own would find the schema by content among the versions of
   * {@code <topic>-value}: the text it prints from a descriptor is not the text a writer
   * registered (nor, for a map field, canonically equal to it), so the search finds nothing.
   */
  static final class ReadSchemas extends DefaultSchemaResolver<ProtobufSchema, DynamicMessage> {
    private final Map<FileDescriptor, SchemaLookupResult<ProtobufSchema>> read =
        new ConcurrentHashMap<>();

    @Override
    public void configure(
        Map<String, ?> configs, SchemaParser<ProtobufSchema, DynamicMessage> ignored) {
      super.configure(configs, new FileParser());
    }

    @Override
    public SchemaLookupResult<ProtobufSchema> resolveSchemaByArtifactReference(
        ArtifactReference reference) {
      SchemaLookupResult<ProtobufSchema> found = super.resolveSchemaByArtifactReference(reference);
      read.put(found.getParsedSchema().getParsedSchema().getFileDescriptor(), found);
      return found;
    }

    @Override
    public SchemaLookupResult<ProtobufSchema> resolveSchema(Record<DynamicMessage> data) {
      FileDescriptor file = data.payload().getDescriptorForType().getFile();
      SchemaLookupResult<ProtobufSchema> found = read.get(file);
      if (found == null) {
        throw new IllegalStateException("no schema was read for a " + data.payload()
            .getDescriptorForType().getFullName() + " of " + file.getName()
            + ": this serializer writes messages its deserializer read");
      }
      return found;
    }
  }

  /**
   * Apicurio's Protobuf schema parser, the descriptor of a registered text built as Apicurio
   * builds one from a {@code .proto} file and its imports ({@code
   * FileDescriptorUtils.parseProtoFileWithDependencies}, the references' texts as the imports).
   * {@code ProtobufSchemaParser.parseSchema} in 3.1.7 builds it another way ({@code
   * FileDescriptorUtils.toDescriptor}), which drops proto3 {@code optional}: the field loses
   * its presence, and a message read with it answers an unset {@code optional string} as
   * {@code ""}, not as unset.
   */
  static final class FileParser extends ProtobufSchemaParser<DynamicMessage> {
    private static final String FILE_NAME = "registered.proto";

    @Override
    public ProtobufSchema parseSchema(
        byte[] rawSchema, Map<String, ParsedSchema<ProtobufSchema>> references) {
      String text = new String(rawSchema, StandardCharsets.UTF_8);
      List<ProtobufSchemaContent> imports = new ArrayList<>();
      addImports(references.values(), imports);
      try {
        FileDescriptor file = FileDescriptorUtils.parseProtoFileWithDependencies(
            ProtobufSchemaContent.of(FILE_NAME, text), imports);
        ProtoFileElement element =
            ProtoParser.Companion.parse(FileDescriptorUtils.DEFAULT_LOCATION, text);
        return new ProtobufSchema(file, element);
      } catch (DescriptorValidationException | ParseSchemaException e) {
        throw new IllegalStateException("cannot read the registered Protobuf schema: " + e, e);
      }
    }

    private static void addImports(
        Collection<ParsedSchema<ProtobufSchema>> references, List<ProtobufSchemaContent> out) {
      for (ParsedSchema<ProtobufSchema> reference : references) {
        out.add(ProtobufSchemaContent.of(reference.referenceName(),
            new String(reference.getRawSchema(), StandardCharsets.UTF_8)));
        if (reference.hasReferences()) {
          addImports(reference.getSchemaReferences(), out);
        }
      }
    }
  }

  /** Apicurio's Kafka serializer and deserializer of {@code DynamicMessage}. */
  static final class Dynamic {
    private Dynamic() {}

    /**
     * Its {@code ProtobufSerializer} keys its cache of resolved schemas by the message's
     * descriptor. Apicurio keys it by the message's class (for a generated class the same as
     * its schema), but every {@code DynamicMessage} has the one class: the schema of the first
     * message would frame all later ones, whatever their schema.
     */
    static final class Serializer extends KafkaSerializer<ProtobufSchema, DynamicMessage> {
      Serializer(ReadSchemas schemas) {
        super(new ProtobufSerializer<DynamicMessage>(schemas) {
          @Override
          protected Object getSchemaCacheKey(DynamicMessage data) {
            return data.getDescriptorForType();
          }
        });
      }
    }

    /**
     * Its {@code ProtobufDeserializer} reads the message type the frame's message indexes
     * name in the writer's schema ({@code [0]}: the schema's first message; {@code [1, 0]}: the
     * first message nested in its second). Apicurio 3.1.7 reads the indexes but leaves them
     * unused: it takes the type from a type-ref prefix, a header or a configured class, none of
     * which a Confluent-framed value has.
     */
    static final class Deserializer extends KafkaDeserializer<ProtobufSchema, DynamicMessage> {
      Deserializer(ReadSchemas schemas) {
        super(new ProtobufDeserializer<DynamicMessage>(schemas) {
          @Override
          protected DynamicMessage readData(
              ParsedSchema<ProtobufSchema> schema, ByteBuffer buffer, int start, int length) {
            // start indexes the buffer's array (Apicurio adds the buffer's arrayOffset).
            InputStream in = new ByteArrayInputStream(buffer.array(), start, length);
            try {
              List<Integer> indexes = MessageIndexesUtil.readFrom(in);
              return DynamicMessage.parseFrom(messageType(schema, indexes), in);
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          }
        });
      }
    }
  }

  /** The message type {@code indexes} name in {@code schema}'s file. */
  static Descriptor messageType(ParsedSchema<ProtobufSchema> schema, List<Integer> indexes) {
    FileDescriptor file = schema.getParsedSchema().getFileDescriptor();
    List<Descriptor> types = file.getMessageTypes();
    Descriptor type = null;
    for (int index : indexes) {
      if (index < 0 || index >= types.size()) {
        throw new IllegalArgumentException(
            "message indexes " + indexes + " name no message of " + file.getName());
      }
      type = types.get(index);
      types = type.getNestedTypes();
    }
    return type;
  }
}
