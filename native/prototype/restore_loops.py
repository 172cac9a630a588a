"""The prototype that decided the compiled fast path (docs/native.md, "Why Rust"): how far
each way of restoring goes on the bench's 1M-record changelog, in interleaved rounds of one
run. Not part of the product or the tests; run it by hand inside the project's virtualenv
with the extension built:

    .venv/bin/python native/prototype/restore_loops.py [RECORDS [ROUNDS]]

It starts its own broker (``spark-statestore broker``) and produces the bench's changelog.
"""

import json
import resource
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pyarrow as pa

from spark_statestore.bench import follower as fb
from spark_statestore.connectors.kafka.follower import source as _source
from spark_statestore.connectors.kafka.local.child import broker_child
from spark_statestore.store.spec import StoreOptions

_source._READER_DEFAULTS["fetch.queue.backoff.ms"] = 0
_orig = fb.consumer_settings
fb.consumer_settings = lambda b, p: {**_orig(b, p), "fetch.queue.backoff.ms": 0}
RECORDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
CHUNK = 50_000


def settings(bootstrap, purpose):
    out = {}
    for k, v in fb.consumer_settings(bootstrap, purpose).items():
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def py_loop(changelog, mode, root):
    import plyvel
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    db = None
    if mode != "consume":
        path = tempfile.mkdtemp(dir=root)
        db = plyvel.DB(path, create_if_missing=True, **StoreOptions().leveldb_options())
    c = Consumer(fb.consumer_settings(changelog.bootstrap, "proto"))
    ends = changelog.end_offsets
    t0 = time.perf_counter()
    c.assign([TopicPartition(fb.TOPIC, p, 0) for p in range(fb.PARTITIONS)])
    pending = set(ends)
    n = 0
    while pending:
        msgs = c.consume(CHUNK, timeout=0.5)
        batch = db.write_batch(sync=True) if db is not None else None
        last = {}
        for m in msgs:
            if m.error() is None:
                k, v, _o = m.key(), m.value(), m.offset()
                if mode == "consume":
                    continue
                if mode == "all_headers":
                    m.headers()
                    m.timestamp()
                else:
                    last[m.partition()] = m
                batch.put(b"d" + k, v)
                n += 1
            else:
                if (
                    m.error().code() == KafkaError._PARTITION_EOF
                    and m.offset() >= ends[m.partition()]
                ):
                    pending.discard(m.partition())
        for m in last.values():
            m.headers()
        if batch is not None:
            batch.write()
    dt = time.perf_counter() - t0
    c.close()
    if db is not None:
        db.close()
    return RECORDS / dt


def native_loop(changelog, root, store=True):
    import spark_statestore_native as nat

    path = tempfile.mkdtemp(dir=root)
    db = nat.DB(path, create_if_missing=True, lru_cache_size=64 << 20, bloom_filter_bits=10)
    r = nat.ColumnReader(list(settings(changelog.bootstrap, "native").items()), fb.TOPIC)
    ends = changelog.end_offsets
    t0 = time.perf_counter()
    r.assign([(p, 0) for p in range(fb.PARTITIONS)])
    pending = set(ends)
    n = 0
    while pending:
        polled = r.poll(CHUNK, 500, True)
        rows, keys, values, parts, offs, ts, events, merged = polled[:8]
        for code, _name, p, o, _text in events:
            if code == -191 and o >= ends[p]:
                pending.discard(p)
        if rows and store:
            k = pa.Array.from_buffers(
                pa.binary(),
                rows,
                [
                    None if keys[0] is None else pa.py_buffer(keys[0]),
                    pa.py_buffer(keys[1]),
                    pa.py_buffer(keys[2]),
                ],
            )
            v = pa.Array.from_buffers(
                pa.binary(),
                rows,
                [
                    None if values[0] is None else pa.py_buffer(values[0]),
                    pa.py_buffer(values[1]),
                    pa.py_buffer(values[2]),
                ],
            )
            pp = pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(parts)])
            oo = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offs)])
            tt = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(ts)])
            b = db.write_batch(sync=True)
            b.put_records(k, v, pp, oo, tt, prefix=b"d", max_partition=8)
            b.put(b"m:position", json.dumps(merged).encode())
            b.write()
        n += rows
    dt = time.perf_counter() - t0
    r.close()
    assert n == RECORDS, n
    if store:
        for _p, (key, value) in changelog.last_records.items():
            got = db.get(b"d" + key)
            assert got[21:] == value, (key, got)
    db.close()
    return RECORDS / dt


def main():
    with (
        tempfile.TemporaryDirectory(prefix="proto-") as root,
        broker_child(Path(root) / "broker.log", [f"{fb.TOPIC}:{fb.PARTITIONS}"]) as bootstrap,
    ):
        t = time.time()
        changelog = fb.produce_changelog(bootstrap, RECORDS, 10_000)
        print("produced", time.time() - t, flush=True)
        runs = {
            "follower (the path SPARK_STATESTORE_NATIVE selects)": partial(
                fb.follower_run, root, changelog
            ),
            "bare consume+WriteBatch (bench peer)": partial(fb.bare_run, root, changelog),
            "py consume key/value/offset only": partial(py_loop, changelog, "consume", root),
            "py + headers()/timestamp() every record + put": partial(
                py_loop, changelog, "all_headers", root
            ),
            "py + headers() of the last record per partition + put": partial(
                py_loop, changelog, "last_headers", root
            ),
            "native reader only (columns, merged headers)": partial(
                native_loop, changelog, root, False
            ),
            "native reader + native put_records": partial(native_loop, changelog, root, True),
        }
        rates = {k: [] for k in runs}
        for _ in range(ROUNDS):
            for name, run in runs.items():
                rates[name].append(run())
                print(f"  {name}: {rates[name][-1] / 1e3:.0f}k/s", flush=True)
        print(json.dumps({k: max(v) for k, v in rates.items()}, indent=1))
        print("maxrss MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


main()
