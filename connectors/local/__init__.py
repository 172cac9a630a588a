"""This machine standing in for several: hosts as network namespaces on a bridge, what the
local Kafka and Spark clusters share about their processes, and a local schema registry."""

from spark_statestore.connectors.local.errors import (
    HostsError,
    HostsUnavailableError,
    LocalRegistryError,
    LocalRegistryStartError,
)
from spark_statestore.connectors.local.hosts import (
    DEFAULT_PREFIX,
    Host,
    LocalHosts,
    check_host_tools,
    remove_stale_hosts,
)
from spark_statestore.connectors.local.processes import die_with_parent, free_ports
from spark_statestore.connectors.local.schema_registry import LocalSchemaRegistry

__all__ = [
    "DEFAULT_PREFIX",
    "Host",
    "HostsError",
    "HostsUnavailableError",
    "LocalHosts",
    "LocalRegistryError",
    "LocalRegistryStartError",
    "LocalSchemaRegistry",
    "check_host_tools",
    "die_with_parent",
    "free_ports",
    "remove_stale_hosts",
]
