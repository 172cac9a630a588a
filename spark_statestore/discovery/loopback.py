"""Which loopback this process is on: what an announcement carries with a loopback location
(:mod:`~spark_statestore.discovery.announcement`) and what a reader compares it with before it
dials one (:mod:`~spark_statestore.discovery.trust`)."""

from __future__ import annotations

import functools
import os

__all__ = ["loopback_identity"]


@functools.cache
def loopback_identity() -> str | None:
    """This process's loopback: the kernel's boot id and the network namespace's inode
    (Linux); None where they cannot be read (loopback locations are then never dialed from
    announcements)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None
    return f"{boot}/net:{namespace}" if boot else None
