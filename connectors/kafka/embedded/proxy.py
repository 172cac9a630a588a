"""A transaction-aware Kafka protocol proxy in front of librdkafka's mock cluster.

Why it exists: the mock broker implements transactional produce and writes COMMIT/ABORT
control batches, but its Fetch handler always answers ``LastStableOffset = high watermark``
with an empty aborted-transactions list, its ListOffsets ignores the isolation level, and its
InitProducerId does not abort the open transaction of a fenced producer. A read_committed
consumer would therefore see aborted and uncommitted records. Real Kafka brokers do all three;
our plugin relies on them (aborted changelog records must never reach a store).

What it does: each mock broker advertises the proxy's port (``rd_kafka_mock_broker_set_host_port``),
so every client connection passes through here. Requests and responses are forwarded as they
are, except:

* Fetch (v4-v11) with ``isolation_level = read_committed``: the proxy brings its per-partition
  transaction index (:mod:`.txnlog`) up to the response's high watermark by reading the log
  itself (a read_uncommitted Fetch on its own connection), cuts the records at the last stable
  offset, reports that LSO and lists the aborted transactions, as a broker does. The client
  library then drops aborted batches itself (standard KIP-98 consumer behaviour).
* ListOffsets (v2-v5) for ``latest`` under read_committed: answers the LSO.
* InitProducerId for a transactional id with an earlier producer: first aborts that producer's
  ongoing transaction with an EndTxn on its behalf (what Kafka's transaction coordinator does
  when it fences a zombie), then forwards the request.

The API versions of Fetch and ListOffsets are capped (see :mod:`.broker`) so that only the
non-flexible encodings parsed here are negotiated. Transaction timeouts are not emulated: a
producer that dies and never comes back keeps its partitions' LSO where it was.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_statestore.connectors.kafka.embedded.messages import (
    FETCH_VERSIONS,
    LIST_OFFSETS_VERSIONS,
    TopicPartition,
    parse_fetch_request,
    parse_init_producer_id_request,
    parse_list_offsets_request,
    read_producer_id,
    uvarint,
)
from spark_statestore.connectors.kafka.embedded.txnlog import PartitionTxnLog
from spark_statestore.connectors.kafka.embedded.upstream import (
    IndexUnavailableError,
    UpstreamChannel,
    frame_bytes,
    read_frame,
)
from spark_statestore.connectors.kafka.embedded.wire import (
    ApiKey,
    BatchInfo,
    Reader,
    WireError,
    Writer,
    scan_batches,
)

__all__ = ["FETCH_VERSIONS", "LIST_OFFSETS_VERSIONS", "TxnProxy"]

log = logging.getLogger(__name__)

_LEN = struct.Struct(">i")
_OFFSET_OUT_OF_RANGE = 1
_INDEX_FETCH_MAX_BYTES = 32 * 1024 * 1024

T = TypeVar("T")


@dataclass(slots=True)
class _Pending:
    api_key: int
    version: int
    context: Any


class TxnProxy:
    """Proxy listeners for the brokers of one mock cluster (see module docstring).

    Parameters
    ----------
    upstreams
        broker id -> (host, port) of the mock broker's real listener.
    host
        Interface the proxy listens on.
    """

    def __init__(self, upstreams: dict[int, tuple[str, int]], host: str = "127.0.0.1") -> None:
        self._upstreams = dict(upstreams)
        self._host = host
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._channels: dict[int, UpstreamChannel] = {}
        self._logs: dict[TopicPartition, PartitionTxnLog] = {}
        self._log_locks: dict[TopicPartition, asyncio.Lock] = {}
        self._producers: dict[str, tuple[int, int]] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self.ports: dict[int, int] = {}

    # -- lifecycle (called from other threads) --------------------------------------------
    def start(self) -> dict[int, int]:
        """Start listening; returns broker id -> proxy port."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="statestore-txn-proxy", daemon=True
        )
        self._thread.start()
        self.ports = self._run(self._listen())
        return dict(self.ports)

    def stop(self) -> None:
        """Close every listener and connection and stop the proxy thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._run(self._shutdown(), timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
            self._loop = None
            self._thread = None

    def last_stable_offset(self, topic: str, partition: int) -> int | None:
        """The LSO the proxy last computed for a partition (None if never asked). For tests."""
        txn_log = self._logs.get((topic, partition))
        return None if txn_log is None else txn_log.last_stable_offset()

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- event loop side ------------------------------------------------------------------
    async def _listen(self) -> dict[int, int]:
        ports: dict[int, int] = {}
        for broker_id, (host, port) in sorted(self._upstreams.items()):
            self._channels[broker_id] = UpstreamChannel(host, port)

            async def handle(
                reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter,
                broker_id: int = broker_id,
            ) -> None:
                task = asyncio.current_task()
                assert task is not None
                self._connections.add(task)
                try:
                    await self._serve(broker_id, reader, writer)
                except asyncio.CancelledError:
                    pass  # proxy shutdown
                finally:
                    self._connections.discard(task)

            server = await asyncio.start_server(handle, self._host, 0)
            self._servers.append(server)
            ports[broker_id] = server.sockets[0].getsockname()[1]
        return ports

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        for channel in self._channels.values():
            channel.close()

    async def _serve(
        self,
        broker_id: int,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        host, port = self._upstreams[broker_id]
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            # The mock broker is down (fault injection): refuse like it would.
            client_writer.close()
            return
        pending: dict[int, _Pending] = {}
        pumps = [
            asyncio.create_task(self._pump_requests(broker_id, client_reader, up_writer, pending)),
            asyncio.create_task(self._pump_responses(broker_id, up_reader, client_writer, pending)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            up_writer.close()
            client_writer.close()

    async def _pump_requests(
        self,
        broker_id: int,
        client: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        pending: dict[int, _Pending],
    ) -> None:
        try:
            while True:
                frame = await read_frame(client)
                api_key, version, corr = struct.unpack_from(">hhi", frame)
                context: Any = None
                try:
                    if api_key == ApiKey.FETCH:
                        context = parse_fetch_request(frame, version)
                    elif api_key == ApiKey.LIST_OFFSETS:
                        context = parse_list_offsets_request(frame, version)
                    elif api_key == ApiKey.INIT_PRODUCER_ID:
                        init = parse_init_producer_id_request(frame, version)
                        if init is not None:
                            context, current_pid = init
                            await self._fence_previous(broker_id, context, current_pid)
                except WireError as exc:
                    log.warning(
                        "txn proxy: unparsable request api=%d v%d: %s", api_key, version, exc
                    )
                    context = None
                if context is not None:
                    pending[corr] = _Pending(api_key, version, context)
                upstream.write(frame_bytes(frame))
                await upstream.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def _pump_responses(
        self,
        broker_id: int,
        upstream: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        pending: dict[int, _Pending],
    ) -> None:
        try:
            while True:
                frame = await read_frame(upstream)
                (corr,) = _LEN.unpack_from(frame)
                entry = pending.pop(corr, None)
                if entry is not None:
                    try:
                        frame = await self._rewrite(broker_id, entry, frame)
                    except (WireError, IndexUnavailableError) as exc:
                        # Never forward an unfiltered read_committed answer: drop the connection
                        # instead, the client reconnects and asks again.
                        log.warning("txn proxy: closing connection (%s)", exc)
                        return
                client.write(frame_bytes(frame))
                await client.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def _rewrite(self, broker_id: int, entry: _Pending, frame: bytes) -> bytes:
        if entry.api_key == ApiKey.FETCH:
            return await self._rewrite_fetch(broker_id, entry.version, entry.context, frame)
        if entry.api_key == ApiKey.LIST_OFFSETS:
            return await self._rewrite_list_offsets(broker_id, entry.version, entry.context, frame)
        if entry.api_key == ApiKey.INIT_PRODUCER_ID:
            producer = read_producer_id(entry.version, frame)
            if producer is not None:
                self._producers[entry.context] = producer
        return frame

    # -- transaction index ----------------------------------------------------------------
    async def _txn_log(
        self,
        broker_id: int,
        tp: TopicPartition,
        upto: int,
        in_hand: list[BatchInfo] | None = None,
    ) -> PartitionTxnLog:
        """The index of ``tp`` brought up to at least offset ``upto`` (a high watermark).

        ``in_hand`` are batches of ``tp`` the caller already holds (a fetch response being
        rewritten); the index takes what continues its scan from them and reads only the rest
        of the log itself.
        """
        lock = self._log_locks.setdefault(tp, asyncio.Lock())
        async with lock:
            txn_log = self._logs.setdefault(tp, PartitionTxnLog())
            if in_hand:
                txn_log.apply(in_hand)
            channel = self._channels[broker_id]
            while txn_log.scanned_to < upto:
                body = (
                    Writer()
                    .i32(-1)  # replica id
                    .i32(0)  # max wait
                    .i32(0)  # min bytes
                    .i32(_INDEX_FETCH_MAX_BYTES)
                    .i8(0)  # read_uncommitted: we want the control batches too
                    .i32(1)
                    .string(tp[0])
                    .i32(1)
                    .i32(tp[1])
                    .i64(txn_log.scanned_to)
                    .i64(-1)  # log start offset (follower only)
                    .i32(_INDEX_FETCH_MAX_BYTES)
                    .build()
                )
                r = await channel.call(ApiKey.FETCH, 5, body)
                r.i32()  # throttle
                if r.array_len() != 1 or r.string() != tp[0] or r.array_len() != 1:
                    raise IndexUnavailableError(f"unexpected index fetch answer for {tp}")
                r.i32()  # partition
                error = r.i16()
                r.i64()  # high watermark
                r.i64()  # last stable offset (meaningless on the mock)
                log_start = r.i64()
                for _ in range(max(r.array_len(), 0)):
                    r.i64()
                    r.i64()
                records = r.bytes_()
                if error == _OFFSET_OUT_OF_RANGE and log_start > txn_log.scanned_to:
                    log.warning(
                        "txn proxy: %s-%d truncated below offset %d, index resumes there",
                        tp[0],
                        tp[1],
                        log_start,
                    )
                    txn_log.skip_to(log_start)
                    continue
                if error:
                    raise IndexUnavailableError(
                        f"index fetch of {tp[0]}-{tp[1]} at {txn_log.scanned_to} failed: {error}"
                    )
                batches, _ = scan_batches(records or b"")
                before = txn_log.scanned_to
                txn_log.apply(batches)
                if txn_log.scanned_to == before:
                    raise IndexUnavailableError(
                        f"index fetch of {tp[0]}-{tp[1]} made no progress at offset {before}"
                    )
            return txn_log

    async def _fence_previous(
        self, broker_id: int, transactional_id: str, current_pid: int
    ) -> None:
        """Fence the previous producer of ``transactional_id``, as Kafka's coordinator does.

        The mock hands every InitProducerId a brand-new producer id and leaves the old one
        valid, so a zombie could still commit. Kafka instead aborts the zombie's open
        transaction and bumps its epoch. We do the same through the mock's own API: EndTxn
        (abort) with the zombie's id and epoch, then InitProducerId v3 naming the zombie's
        id and epoch, which makes the mock bump that epoch (KIP-360). Any later request of
        the zombie then fails with INVALID_PRODUCER_EPOCH.
        """
        known = self._producers.get(transactional_id)
        if known is None or known[0] == current_pid:
            # First producer of this id, or the producer bumping its own epoch (KIP-360):
            # nothing to fence.
            return
        del self._producers[transactional_id]
        pid, epoch = known
        channel = self._channels[broker_id]
        abort = Writer().string(transactional_id).i64(pid).i16(epoch).i8(0).build()
        encoded_id = transactional_id.encode()
        bump = (
            Writer()
            .raw(uvarint(len(encoded_id) + 1))
            .raw(encoded_id)
            .i32(60_000)  # transaction timeout
            .i64(pid)
            .i16(epoch)
            .raw(b"\x00")  # no tagged fields
            .build()
        )
        try:
            r = await channel.call(ApiKey.END_TXN, 1, abort)
            r.i32()  # throttle
            abort_error = r.i16()
            r = await channel.call(ApiKey.INIT_PRODUCER_ID, 3, bump, flexible=True)
            r.i32()  # throttle
            bump_error = r.i16()
        except (IndexUnavailableError, WireError) as exc:
            log.warning("txn proxy: could not fence the producer of %r: %s", transactional_id, exc)
            return
        if abort_error or bump_error:
            log.debug(
                "txn proxy: fencing %r answered EndTxn=%d InitProducerId=%d",
                transactional_id,
                abort_error,
                bump_error,
            )

    async def _rewrite_fetch(
        self, broker_id: int, version: int, offsets: dict[TopicPartition, int], frame: bytes
    ) -> bytes:
        r = Reader(frame)
        w = Writer().i32(r.i32())  # correlation id
        w.i32(r.i32())  # throttle
        if version >= 7:
            w.i16(r.i16()).i32(r.i32())  # error code, session id
        topics = r.array_len()
        w.i32(topics)
        for _ in range(topics):
            topic = r.string() or ""
            w.string(topic)
            partitions = r.array_len()
            w.i32(partitions)
            for _ in range(partitions):
                partition = r.i32()
                error = r.i16()
                high_watermark = r.i64()
                lso = r.i64()
                log_start = r.i64() if version >= 5 else None
                aborted_in = [(r.i64(), r.i64()) for _ in range(max(r.array_len(), 0))]
                preferred = r.i32() if version >= 11 else None
                records = r.bytes_()
                aborted_out = aborted_in
                if error == 0 and records is not None:
                    tp = (topic, partition)
                    batches, _ = scan_batches(records)
                    txn_log = await self._txn_log(broker_id, tp, high_watermark, batches)
                    lso = min(txn_log.last_stable_offset(), high_watermark)
                    keep = 0
                    for batch in batches:
                        if batch.last_offset >= lso:
                            break
                        keep = batch.end
                    fetch_offset = offsets.get(tp, batches[0].base_offset if batches else lso)
                    aborted_out = [
                        (txn.producer_id, txn.first_offset)
                        for txn in txn_log.aborted_since(fetch_offset, lso)
                    ]
                    records = records[:keep]
                w.i32(partition).i16(error).i64(high_watermark).i64(lso)
                if log_start is not None:
                    w.i64(log_start)
                w.i32(len(aborted_out))
                for pid, first in aborted_out:
                    w.i64(pid).i64(first)
                if preferred is not None:
                    w.i32(preferred)
                w.bytes_(records)
        w.raw(r.rest())
        return w.build()

    async def _rewrite_list_offsets(
        self, broker_id: int, version: int, latest: set[TopicPartition], frame: bytes
    ) -> bytes:
        r = Reader(frame)
        w = Writer().i32(r.i32()).i32(r.i32())  # correlation id, throttle
        topics = r.array_len()
        w.i32(topics)
        for _ in range(topics):
            topic = r.string() or ""
            w.string(topic)
            partitions = r.array_len()
            w.i32(partitions)
            for _ in range(partitions):
                partition = r.i32()
                error = r.i16()
                timestamp = r.i64()
                offset = r.i64()
                if error == 0 and (topic, partition) in latest and offset >= 0:
                    txn_log = await self._txn_log(broker_id, (topic, partition), offset)
                    offset = min(offset, txn_log.last_stable_offset())
                w.i32(partition).i16(error).i64(timestamp).i64(offset)
                if version >= 4:
                    w.i32(r.i32())  # leader epoch
        w.raw(r.rest())
        return w.build()
