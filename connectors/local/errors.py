"""Errors of the local stand-ins for other machines (network namespaces on a bridge)."""

from __future__ import annotations

from spark_statestore.errors import StateStoreError

__all__ = ["HostsError", "HostsUnavailableError"]


class HostsError(StateStoreError, RuntimeError):
    """Setting up or tearing down local hosts (namespaces, links) failed; the message
    names the command and what it printed."""


class HostsUnavailableError(HostsError):
    """This machine cannot make local hosts: not root, or ``ip``/``unshare`` missing. Tests
    skip with this message."""
