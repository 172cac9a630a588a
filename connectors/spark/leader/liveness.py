"""Telling a hung sink store server from a busy one, and replacing it.

A commit's reply may legitimately take long (a big batch), so no deadline on the whole commit
can tell a server that works from one that hangs. While a commit process waits for its
reply, a :class:`LivenessWatch` asks the server every so often whether it is alive (the
action ``sink_alive``: answered on another gRPC thread than the commit's, without waiting
for the commit). A server that answers nothing for ``serveLivenessTimeoutMs`` (SIGSTOPped, frozen,
its interpreter blocked) is hung: the watch SIGKILLs that very process (pid and start
time) and the commit's call ends with its connection. The commit process then commits
through a new server, with the same guarantees as after a crash: the new server's open
completes or discards the interrupted store commit, its producer's transactional id fences
the old producer, and the commit protocol skips a batch the store has or rolls it forward
from the changelog.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

from spark_statestore.connectors.spark.leader.protocol import ACTION_ALIVE

if TYPE_CHECKING:
    from spark_statestore.connectors.spark.leader.protocol import ServerRecord

__all__ = ["KILL_WAIT_S", "PROBES_PER_TIMEOUT", "LivenessWatch", "replace_hung"]

_log = logging.getLogger(__name__)

PROBES_PER_TIMEOUT = 5
"""Probes per liveness timeout. A server that hangs is killed one timeout after its last
answer: each probe waits for its answer until then."""
KILL_WAIT_S = 30.0
"""How long a SIGKILLed server's exit is awaited (it only waits on the kernel)."""


def replace_hung(path: str, record: ServerRecord, why: str) -> bool:
    """SIGKILL the sink store server of ``record`` (that process, not a later one with its
    pid) because ``why``, and wait for its exit; False when it had exited already."""
    killed = record.process.kill(KILL_WAIT_S)
    if killed:
        _log.warning(
            "the sink's store server of %s (pid %d) %s: killed it (SIGKILL); the store's "
            "next open completes or discards a commit it left",
            path,
            record.pid,
            why,
        )
    return killed


class LivenessWatch:
    """Probes the sink store server of ``record`` from a daemon thread while the caller
    waits on it, and kills it when it answers nothing for ``timeout_s``.

    Parameters
    ----------
    path
        The store's directory (its credentials file gives the probe's token).
    record
        The server (its location, secret and process).
    timeout_s
        How long the server may answer nothing before it is taken for hung.

    Notes
    -----
    Any answer counts, a refusal too: it shows a thread of the server runs. A server whose
    process is gone is no longer watched (the caller's call fails by itself).
    """

    def __init__(self, path: str, record: ServerRecord, timeout_s: float) -> None:
        self.path = path
        self.record = record
        self.timeout_s = timeout_s
        self.killed = False
        """Whether the watch killed the server (the caller's call then failed because of it)."""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LivenessWatch:
        self._thread = threading.Thread(
            target=self._run, name=f"sink-liveness-{self.record.pid}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()  # at most one probe's wait: up to timeout_s

    def _run(self) -> None:
        from spark_statestore.errors import StateStoreError
        from spark_statestore.serve.client import client_for_store
        from spark_statestore.serve.errors import ServerUnavailableError

        interval = self.timeout_s / PROBES_PER_TIMEOUT
        try:
            client = client_for_store(self.path, self.record.location, timeout_s=self.timeout_s)
        except StateStoreError as exc:  # its credentials are gone: it is stopping
            _log.debug("cannot watch the sink's store server of %s: %s", self.path, exc)
            return
        answered = time.monotonic()
        pause = interval
        with client:
            while not self._done.wait(pause):
                left = answered + self.timeout_s - time.monotonic()
                if left <= 0:
                    self.killed = replace_hung(
                        self.path,
                        self.record,
                        f"did not answer for {self.timeout_s:g} s (option "
                        "'serveLivenessTimeoutMs')",
                    )
                    return
                try:
                    client.call(ACTION_ALIVE, {"secret": self.record.secret}, timeout_s=left)
                except ServerUnavailableError:
                    if not self.record.process.alive():
                        return  # it died: the caller's call fails and says so
                    # No answer: ask again soon, and kill it once the timeout has passed.
                    pause = min(interval, max(0.0, answered + self.timeout_s - time.monotonic()))
                    continue
                except StateStoreError:
                    pass  # a refusal is an answer too
                answered = time.monotonic()
                pause = interval
