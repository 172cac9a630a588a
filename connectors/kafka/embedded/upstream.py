"""The proxy's own request/response connection to one mock broker, and frame helpers."""

from __future__ import annotations

import asyncio
import struct

from spark_statestore.connectors.kafka.embedded.wire import Reader, request_header

__all__ = ["IndexUnavailableError", "UpstreamChannel", "frame_bytes", "read_frame"]

_LEN = struct.Struct(">i")
_CLIENT_ID = "spark-statestore-txn-proxy"


class IndexUnavailableError(RuntimeError):
    """The proxy could not read the log it needs to answer a read_committed request."""


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _LEN.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


def frame_bytes(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body


class UpstreamChannel:
    """The proxy's own request/response connection to one mock broker."""

    def __init__(self, host: str, port: int) -> None:
        self._addr = (host, port)
        self._lock = asyncio.Lock()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._correlation = 0

    async def call(self, api_key: int, version: int, body: bytes, flexible: bool = False) -> Reader:
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._streams is None:
                        self._streams = await asyncio.open_connection(*self._addr)
                    reader, writer = self._streams
                    self._correlation += 1
                    corr = self._correlation
                    head = request_header(api_key, version, corr, _CLIENT_ID).build()
                    if flexible:
                        head += b"\x00"  # request header v2: no tagged fields
                    writer.write(frame_bytes(head + body))
                    await writer.drain()
                    frame = await read_frame(reader)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    self.close()
                    if attempt == 2:
                        raise IndexUnavailableError(
                            f"proxy connection to mock broker {self._addr} failed: {exc}"
                        ) from exc
                    continue
                r = Reader(frame)
                if r.i32() != corr:
                    self.close()
                    raise IndexUnavailableError("proxy channel lost response ordering")
                if flexible:
                    r.skip_tagged_fields()  # response header v1
                return r
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
