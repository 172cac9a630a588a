"""Pinned snapshots of a store server: ids, leases, time-to-live, a maximum count.

A pin keeps one :class:`~spark_statestore.store.snapshot.Snapshot` open so that every task of
a query reads the same commit. Reads *lease* the pin while they stream; a pin is dropped when
released or after ``ttl_s`` seconds without use, but its snapshot is closed only once no read
holds a lease (closing a LevelDB snapshot under a running iterator is not safe). Expiry is
lazy: the server calls :meth:`PinRegistry.expire` on every request, so no timer thread runs.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_statestore.serve.callers import CallerCounts
from spark_statestore.serve.errors import SnapshotExpiredError, TooManyPinsError

if TYPE_CHECKING:
    from spark_statestore.store.snapshot import Snapshot

__all__ = ["PinLease", "PinRegistry"]

_FORGOTTEN_MAX = 4096  # ids of dropped pins remembered to say why they are gone


@dataclass(slots=True)
class _Pin:
    snapshot: Snapshot
    last_used: float
    client: str = ""
    leases: int = 0
    dropped: bool = False


class PinLease:
    """One read's hold on a pin (see :meth:`PinRegistry.lease`)."""

    __slots__ = ("_pin", "snapshot")

    def __init__(self, pin: _Pin) -> None:
        self._pin: _Pin | None = pin
        self.snapshot = pin.snapshot


class PinRegistry:
    """The pinned snapshots of one server (thread-safe).

    Parameters
    ----------
    ttl_s
        Seconds without use after which a pin expires.
    max_pins
        The most pins alive at once.
    max_pins_per_client, max_pins_per_peer
        The most pins alive at once for one client, and for the clients of one peer
        (None: only ``max_pins``); see :mod:`~spark_statestore.serve.callers`.
    clock
        Monotonic seconds (injectable for tests).
    where
        Names the server in error messages (e.g. its location).
    """

    def __init__(
        self,
        *,
        ttl_s: float,
        max_pins: int,
        clock: Callable[[], float],
        where: str,
        max_pins_per_client: int | None = None,
        max_pins_per_peer: int | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_pins = max_pins
        self._held = CallerCounts(
            per_client=max_pins_per_client,
            per_peer=max_pins_per_peer,
            client_option="max_pins_per_client",
            peer_option="max_pins_per_peer",
        )
        self.where = where
        self._clock = clock
        self._lock = threading.Lock()
        self._pins: dict[str, _Pin] = {}
        self._forgotten: OrderedDict[str, str] = OrderedDict()  # id -> why it is gone
        self._closed = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._pins)

    def pin(self, snapshot: Snapshot, *, client: str = "") -> str:
        """Register ``snapshot`` for ``client`` (a
        :func:`~spark_statestore.serve.callers.caller_key`) and return its new id; the
        registry closes it from now on.

        Raises
        ------
        TooManyPinsError
            If ``max_pins`` pins are alive, or ``max_pins_per_client`` of ``client``, or
            ``max_pins_per_peer`` of its peer's clients (``snapshot`` is closed then).
        SnapshotExpiredError
            If the registry is closed (the server is shutting down).
        """
        snapshot_id = uuid.uuid4().hex
        with self._lock:
            if self._closed:
                error: Exception | None = SnapshotExpiredError(
                    f"store server {self.where} is shutting down; re-run the query", self.where
                )
            elif len(self._pins) >= self.max_pins:
                error = TooManyPinsError(
                    f"store server {self.where} already holds {len(self._pins)} pinned "
                    f"snapshots (max_pins={self.max_pins}); release snapshots when their "
                    f"query is done, wait for idle pins to expire ({self.ttl_s:g} s without "
                    "use), or start the server with a larger max_pins",
                    self.where,
                )
            elif (refused := self._held.refusal(client)) is not None:
                error = TooManyPinsError(
                    f"store server {self.where} refuses another pinned snapshot: {refused}; "
                    "release snapshots when their query is done, or wait for idle pins to "
                    f"expire ({self.ttl_s:g} s without use)",
                    self.where,
                )
            else:
                error = None
                self._pins[snapshot_id] = _Pin(snapshot, self._clock(), client)
                self._held.add(client)
        if error is not None:
            snapshot.close()
            raise error
        return snapshot_id

    def lease(self, snapshot_id: str) -> PinLease:
        """Hold the pin ``snapshot_id`` for one read (refreshing its TTL) until
        :meth:`unlease`; a held pin neither expires nor has its snapshot closed.

        Raises
        ------
        SnapshotExpiredError
            If no such pin is alive; the message says why when it is known.
        """
        with self._lock:
            pin = self._pins.get(snapshot_id)
            if pin is None:
                raise self._gone(snapshot_id)
            pin.leases += 1
            pin.last_used = self._clock()
            return PinLease(pin)

    def touch(self, snapshot_id: str) -> None:
        """Refresh the TTL of pin ``snapshot_id``.

        Raises
        ------
        SnapshotExpiredError
            If no such pin is alive.
        """
        with self._lock:
            pin = self._pins.get(snapshot_id)
            if pin is None:
                raise self._gone(snapshot_id)
            pin.last_used = self._clock()

    def unlease(self, lease: PinLease) -> None:
        """End a read's hold (idempotent per lease); refreshes the pin's TTL, and closes
        the snapshot of a pin dropped meanwhile once no read holds it."""
        with self._lock:
            pin, lease._pin = lease._pin, None
            if pin is None:
                return
            pin.leases -= 1
            pin.last_used = self._clock()
            close = pin.dropped and pin.leases == 0
        if close:
            pin.snapshot.close()

    def release(self, snapshot_id: str) -> bool:
        """Drop a pin (idempotent); False when it was not alive."""
        with self._lock:
            pin = self._pins.pop(snapshot_id, None)
            if pin is None:
                return False
            self._uncount(pin)
            self._forget(snapshot_id, "was released")
            pin.dropped = True
            close = pin.leases == 0
        if close:
            pin.snapshot.close()
        return True

    def expire(self) -> int:
        """Drop the pins unused for ``ttl_s`` seconds that no read holds; their count."""
        now = self._clock()
        with self._lock:
            idle = [
                (snapshot_id, pin)
                for snapshot_id, pin in self._pins.items()
                if pin.leases == 0 and now - pin.last_used >= self.ttl_s
            ]
            for snapshot_id, pin in idle:
                del self._pins[snapshot_id]
                self._uncount(pin)
                pin.dropped = True
                self._forget(snapshot_id, f"expired after {self.ttl_s:g} s without use")
        for _, pin in idle:
            pin.snapshot.close()
        return len(idle)

    def close(self) -> None:
        """Drop every pin; snapshots still leased close when their read ends."""
        with self._lock:
            self._closed = True
            pins = list(self._pins.items())
            self._pins.clear()
            self._held.clear()
            for snapshot_id, pin in pins:
                pin.dropped = True
                self._forget(snapshot_id, "was dropped when the server closed")
        for _, pin in pins:
            if pin.leases == 0:
                pin.snapshot.close()

    # -- internals ------------------------------------------------------------------------
    def _uncount(self, pin: _Pin) -> None:
        self._held.remove(pin.client)

    def _forget(self, snapshot_id: str, why: str) -> None:
        self._forgotten[snapshot_id] = why
        while len(self._forgotten) > _FORGOTTEN_MAX:
            self._forgotten.popitem(last=False)

    def _gone(self, snapshot_id: str) -> SnapshotExpiredError:
        why = self._forgotten.get(snapshot_id)
        reason = (
            f"it {why}"
            if why
            else f"it was released, expired after {self.ttl_s:g} s without use, or the "
            "server restarted"
        )
        return SnapshotExpiredError(
            f"snapshot {snapshot_id!r} is no longer pinned on store server {self.where}: "
            f"{reason}; re-run the query to read a new snapshot",
            self.where,
        )
