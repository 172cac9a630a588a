"""Replica routing metadata: lag, hosts and the replicas of a key (KIP-535)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spark_statestore.query._errors import QueryError, check_partition


# -- replicas and lag (KIP-535) ------------------------------------------------------------
def _check_offset(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QueryError(f"{what} must be an int >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class LagInfo:
    """How far a store partition is behind its changelog (KIP-535).

    Offsets are positions, i.e. the *next* offset to read: ``current_offset_position`` is the
    offset after the last changelog record the store has applied (last applied + 1) and
    ``end_offset_position`` is the changelog's end offset (the offset the next record will
    get). So ``offset_lag = end - current``, floored at 0. With transactional changelogs the
    end offset counts commit markers too, so a caught-up store may show a small lag.

    Raises
    ------
    QueryError
        If an offset is not an int >= 0.
    """

    current_offset_position: int
    end_offset_position: int

    def __post_init__(self) -> None:
        _check_offset(self.current_offset_position, "current_offset_position")
        _check_offset(self.end_offset_position, "end_offset_position")

    @property
    def offset_lag(self) -> int:
        """Records the store still has to apply, never negative."""
        return max(0, self.end_offset_position - self.current_offset_position)


@dataclass(frozen=True, slots=True)
class HostInfo:
    """Where a store replica is served: a host name or IP and a TCP port (1..65535)."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise QueryError(f"host must be a non-empty str, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise QueryError(f"port of {self.host} must be an int, got {self.port!r}")
        if not 1 <= self.port <= 65535:
            raise QueryError(f"port of {self.host} must be in 1..65535, got {self.port}")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class KeyQueryMetadata:
    """Which replicas can answer a query for one key (KIP-535).

    Parameters
    ----------
    active
        The active (leader) store's host, or None when no leader is alive.
    standbys
        Hosts of follower replicas of the key's partition.
    partition
        The key's changelog partition; -1 only for :meth:`not_available`.
    """

    active: HostInfo | None
    standbys: frozenset[HostInfo]
    partition: int

    def __post_init__(self) -> None:
        if self.active is not None and not isinstance(self.active, HostInfo):
            raise QueryError(f"active must be a HostInfo or None, got {self.active!r}")
        if isinstance(self.standbys, (str, bytes)) or not isinstance(self.standbys, Iterable):
            raise QueryError(f"standbys must be an iterable of HostInfo, got {self.standbys!r}")
        standbys = frozenset(self.standbys)
        if not all(isinstance(h, HostInfo) for h in standbys):
            raise QueryError(f"standbys must all be HostInfo, got {set(standbys)!r}")
        object.__setattr__(self, "standbys", standbys)
        if self.partition == -1 and not isinstance(self.partition, bool):
            if self.active is not None or standbys:
                raise QueryError("partition -1 means not available: it cannot have hosts")
        else:
            check_partition(self.partition)

    @classmethod
    def not_available(cls) -> KeyQueryMetadata:
        """The metadata of a key no replica can answer for (partition -1, no hosts)."""
        return _NOT_AVAILABLE

    @property
    def is_available(self) -> bool:
        """True when some host (active or standby) can answer for the key."""
        return self.active is not None or bool(self.standbys)


_NOT_AVAILABLE = KeyQueryMetadata(None, frozenset(), -1)
