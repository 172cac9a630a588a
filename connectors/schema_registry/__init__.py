"""The schema registry, reached with confluent-kafka's own client over the
Confluent-compatible HTTP API (Confluent Schema Registry, Apicurio Registry's ``ccompat``
API, and others that speak it): writer schemas by id, a subject's versions, cached per
process."""

from spark_statestore.connectors.schema_registry.client import (
    RegistrySettings,
    SchemaRegistry,
    registry_for,
)
from spark_statestore.connectors.schema_registry.errors import RegistrySettingError

__all__ = ["RegistrySettingError", "RegistrySettings", "SchemaRegistry", "registry_for"]
