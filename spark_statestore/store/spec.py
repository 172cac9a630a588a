"""What a writer expects a store to be (:class:`StoreSpec`) and how to run it
(:class:`StoreOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_statestore.errors import OptionError
from spark_statestore.store.manifest import Role

__all__ = ["DEFAULT_UNCOMMITTED_MAX_BYTES", "StoreOptions", "StoreSpec"]

DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * 1024 * 1024
"""A transaction's in-memory budget before it spills to a redo file (64 MiB)."""


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """The identity a writer expects: created with it when missing, checked when present.

    Parameters
    ----------
    role
        :attr:`Role.LEADER` (a sink writes it) or :attr:`Role.FOLLOWER` (a changelog
        follower writes it).
    changelog_topic
        The changelog topic followed or published; None for a leader without a changelog.
    partitions
        The changelog's partition count (>= 1).
    name
        The store's name in queries; defaults to the directory name when creating, and is
        only checked on reopen when given.
    held_partitions
        A subset follower's changelog partitions (KIP-813's "subset of the data"); None
        holds all of them. Fixed at creation, checked on reopen.
    key_prefix
        A subset follower keeps only the keys starting with these bytes; None keeps all.
        Fixed at creation, checked on reopen.
    history_retention_ms
        Make (or expect) a versioned store with this history retention, in milliseconds:
        a follower of a Kafka Streams versioned store's changelog
        (:mod:`~spark_statestore.store.versions`). None: a key-value store. Fixed at
        creation, checked on reopen.
    """

    role: Role
    changelog_topic: str | None
    partitions: int
    name: str | None = None
    held_partitions: tuple[int, ...] | None = None
    key_prefix: bytes | None = None
    history_retention_ms: int | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "role", Role(self.role))
        except ValueError:
            raise OptionError(
                f"store role must be 'leader' or 'follower', got {self.role!r}"
            ) from None
        if self.changelog_topic is not None and (
            not isinstance(self.changelog_topic, str) or not self.changelog_topic
        ):
            raise OptionError(
                f"changelog topic must be a non-empty str or None, got {self.changelog_topic!r}"
            )
        if self.role is Role.FOLLOWER and self.changelog_topic is None:
            raise OptionError("a follower store needs the changelog topic it follows")
        if (
            isinstance(self.partitions, bool)
            or not isinstance(self.partitions, int)
            or not 1 <= self.partitions <= 2**31 - 1
        ):
            raise OptionError(f"store partitions must be an int >= 1, got {self.partitions!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise OptionError(f"store name must be a non-empty str, got {self.name!r}")
        if self.held_partitions is not None:
            held = tuple(sorted(set(self.held_partitions)))
            bad = [
                p
                for p in held
                if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < self.partitions
            ]
            if bad or not held:
                raise OptionError(
                    f"held partitions {bad or list(held)} are not partitions of "
                    f"{self.changelog_topic!r} (0-{self.partitions - 1})"
                )
            object.__setattr__(
                self, "held_partitions", None if len(held) == self.partitions else held
            )
        if self.key_prefix is not None and (
            not isinstance(self.key_prefix, bytes) or not self.key_prefix
        ):
            raise OptionError(f"key prefix must be non-empty bytes, got {self.key_prefix!r}")
        if self.role is Role.LEADER and (
            self.held_partitions is not None or self.key_prefix is not None
        ):
            raise OptionError("only a follower store can hold a subset of its changelog")
        retention = self.history_retention_ms
        if retention is not None:
            if isinstance(retention, bool) or not isinstance(retention, int) or retention < 0:
                raise OptionError(
                    f"history retention must be an int >= 0 (milliseconds), got {retention!r}"
                )
            if self.role is not Role.FOLLOWER:
                raise OptionError(
                    "only a follower store can be versioned (it follows a Kafka Streams "
                    "versioned store's changelog); a sink writes key-value stores"
                )


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """How a store handle behaves.

    Parameters
    ----------
    uncommitted_max_bytes
        In-memory budget of one transaction; past it the transaction spills to a redo file
        in the store directory and its commit is applied in chunks under a redo marker.
    chunk_bytes
        Size of one chunk of a chunked commit.
    sync
        fsync every commit (survives power loss, not only process crashes).
    lock_wait_seconds
        How long to retry while the store's lock is held by a process that has not said who
        it is yet (starting up, or probing).
    owner_wait_seconds
        How long to wait for a live owner to close the store before failing with
        ``StoreLockedError`` (0: fail at once). Short-lived owners — a sink's commit, a
        reader without a live follower — make others wait rather than fail.
    cache_bytes
        LevelDB's block cache (its default, 8 MiB, makes point reads of a store of a few
        hundred thousand keys go to disk files).
    bloom_filter_bits
        Bits per key of LevelDB's bloom filter (0: none); lookups of absent keys skip files.
    """

    uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES
    chunk_bytes: int = 4 * 1024 * 1024
    sync: bool = True
    lock_wait_seconds: float = 2.0
    owner_wait_seconds: float = 0.0
    cache_bytes: int = 64 * 1024 * 1024
    bloom_filter_bits: int = 10

    def leveldb_options(self) -> dict[str, int]:
        """The keyword arguments for ``plyvel.DB`` that these options imply."""
        return {"lru_cache_size": self.cache_bytes, "bloom_filter_bits": self.bloom_filter_bits}

    def __post_init__(self) -> None:
        if (
            isinstance(self.bloom_filter_bits, bool)
            or not isinstance(self.bloom_filter_bits, int)
            or self.bloom_filter_bits < 0
        ):
            raise OptionError(
                f"store option bloom_filter_bits must be an int >= 0, "
                f"got {self.bloom_filter_bits!r}"
            )
        for name in ("uncommitted_max_bytes", "chunk_bytes", "cache_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"store option {name} must be an int >= 1, got {value!r}")
        if not isinstance(self.sync, bool):
            raise OptionError(f"store option sync must be a bool, got {self.sync!r}")
        if (
            isinstance(self.owner_wait_seconds, bool)
            or not isinstance(self.owner_wait_seconds, (int, float))
            or self.owner_wait_seconds < 0
        ):
            raise OptionError(
                f"store option owner_wait_seconds must be >= 0, got {self.owner_wait_seconds!r}"
            )
        if not isinstance(self.lock_wait_seconds, (int, float)) or self.lock_wait_seconds < 0:
            raise OptionError(
                f"store option lock_wait_seconds must be >= 0, got {self.lock_wait_seconds!r}"
            )
