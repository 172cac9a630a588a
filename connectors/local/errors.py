"""Errors of the local stand-ins for other machines (network namespaces on a bridge) and of
the local schema registry."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = [
    "HostsError",
    "HostsUnavailableError",
    "LocalRegistryError",
    "LocalRegistryStartError",
]


class HostsError(StateStoreError, RuntimeError):
    """Setting up or tearing down local hosts (namespaces, links) failed; the message
    names the command and what it printed."""


class HostsUnavailableError(HostsError):
    """This machine cannot make local hosts: not root, or ``ip``/``unshare`` missing. Tests
    skip with this message."""


class LocalRegistryError(StateStoreError, RuntimeError):
    """The local schema registry cannot run: not built, no Java 21+, or misused."""


class LocalRegistryStartError(LocalRegistryError):
    """The registry exited or did not get ready in time; the message has its log's end.

    Attributes
    ----------
    port_taken
        Another process had one of its ports (a retry with new ports may work).
    """

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken
