"""checkpointLocation as a URI, end to end: Spark writes the checkpoint through its Hadoop
client, the sink reads it through its own layer.

- a ``file:///`` URI in local Spark;
- a real HDFS (Hadoop's MiniDFSCluster, tests/hdfs/): Spark writes the checkpoint over
  ``hdfs://`` (RPC), the sink's commit reads it over WebHDFS;
- the location parser against Hadoop's own ``Path`` in Spark's JVM.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_statestore.connectors.spark.checkpoint_fs import (
    CheckpointLocation,
    CheckpointLocationError,
    CheckpointReadError,
)
from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.store import Store
from tests.hdfs import LocalHdfs
from tests.integration.test_sink import row, start_sink, store_content, write_input
from tests.unit.test_checkpoint_fs import HADOOP_CASES
from tests.unit.test_fuzz_parsers import _LOCATION_CORPUS, _LOCATION_PIECES, mutate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hdfs() -> Iterator[LocalHdfs]:
    with LocalHdfs() as cluster:
        print(f"test HDFS started in {cluster.started_in_s:.1f} s")  # shown with -s / on failure
        yield cluster


def committed(store: Path) -> Any:
    with Store.open(store) as opened:
        return opened.metadata.commit_record


def test_a_file_uri_checkpoint(spark: Any, tmp_path: Path) -> None:
    source, store = tmp_path / "in", tmp_path / "store"
    checkpoint = "file://" + str(tmp_path / "check point%20")  # as users write it: literal
    write_input(source, "1.json", [row("a", "1", 0), row("b", "2", 1)])
    query = start_sink(spark, source, store, checkpoint)  # type: ignore[arg-type]
    try:
        query.processAllAvailable()
        write_input(source, "2.json", [row("a", "10", 2)])
        query.processAllAvailable()
        end_offset = query.lastProgress["sources"][0]["endOffset"]
    finally:
        query.stop()
    assert (tmp_path / "check point%20" / "offsets" / "1").is_file()  # Spark's reading too
    assert store_content(store) == {b"a": b"10", b"b": b"2"}
    record = committed(store)
    assert record.query_id == str(query.id) and record.batch_id == 1
    assert record.source_offsets == [json.loads(end_offset)]


def test_an_hdfs_checkpoint_is_read_through_webhdfs(
    spark: Any, hdfs: LocalHdfs, tmp_path: Path
) -> None:
    source, store = tmp_path / "in", tmp_path / "store"
    checkpoint = f"{hdfs.uri}/checkpoints/orders"
    write_input(source, "1.json", [row("a", "1", 0), row("b", "2", 1)])
    query = (
        spark.readStream.schema(
            "key STRING, value STRING, topic STRING, partition INT, offset BIGINT"
        )
        .json(str(source))
        .writeStream.format("spark_statestore")
        .option("checkpointLocation", checkpoint)
        .option("dfs.namenode.http-address", hdfs.http_address)  # not the default port 9870
        .start(str(store))
    )
    try:
        query.processAllAvailable()
        end_offset = query.lastProgress["sources"][0]["endOffset"]
    finally:
        query.stop()
    assert store_content(store) == {b"a": b"1", b"b": b"2"}
    record = committed(store)
    assert record.query_id == str(query.id) and record.batch_id == 0
    assert record.source_offsets == [json.loads(end_offset)]
    # Nothing of the checkpoint is on the local disk: the sink read it from HDFS.
    assert not Path("/checkpoints/orders").exists()

    # The same files through webhdfs:// (the HTTP address in the URI), and an HA pair whose
    # first NameNode does not answer.
    webhdfs = parse_sink_options(
        {"path": "/s", "checkpointLocation": f"webhdfs://{hdfs.http_address}/checkpoints/orders"},
        streaming=True,
    ).checkpoint
    assert webhdfs is not None and webhdfs.query_id() == str(query.id)
    pair = parse_sink_options(
        {
            "path": "/s",
            "checkpointLocation": "hdfs://cluster/checkpoints/orders",
            "dfs.namenode.http-address": f"127.0.0.1:9,{hdfs.http_address}",
        },
        streaming=True,
    ).checkpoint
    assert pair is not None and pair.source_offsets(0) == [json.loads(end_offset)]
    with pytest.raises(CheckpointReadError, match="does not exist") as caught:
        pair.source_offsets(7)
    assert caught.value.missing and "hdfs://cluster/checkpoints/orders/offsets/7" in str(
        caught.value
    )


def test_a_wrong_namenode_address_names_the_option(hdfs: LocalHdfs) -> None:
    checkpoint = parse_sink_options(
        {"path": "/s", "checkpointLocation": f"{hdfs.uri}/checkpoints/none"}, streaming=True
    ).checkpoint
    assert checkpoint is not None
    # The RPC URI's host on port 9870, where this NameNode does not listen.
    expected = re.escape("set option 'dfs.namenode.http-address'")
    with pytest.raises(CheckpointReadError, match=expected):
        checkpoint.query_id()


def _hadoop_parts(spark: Any, text: str) -> tuple[str | None, str | None, str] | None:
    try:
        uri = spark._jvm.org.apache.hadoop.fs.Path(text).toUri()
    except Exception:  # py4j's error for Hadoop's IllegalArgumentException
        return None
    scheme = uri.getScheme()
    return (None if scheme is None else scheme.lower(), uri.getAuthority(), uri.getPath())


def test_locations_parse_as_hadoops_path_does(spark: Any) -> None:
    """Every location Hadoop reads (so Spark can use) is read the same way here; every one
    refused here is refused by Hadoop too. Excluded, and documented: a "scheme" holding ``?``
    or ``#`` (refused here, a relative path with a query for Java), and an authority Java
    rejects (accepted here: Spark fails on it first)."""
    rng = random.Random(0xC4EC)
    texts = [text for text, _ in HADOOP_CASES] + _LOCATION_CORPUS
    texts += [mutate(rng, rng.choice(texts), _LOCATION_PIECES, texts) for _ in range(800)]
    compared = 0
    for text in texts:
        colon, slash = text.find(":"), text.find("/")
        if not text or (colon != -1 and (slash == -1 or colon < slash) and "?" in text[:colon]):
            continue
        if colon != -1 and (slash == -1 or colon < slash) and "#" in text[:colon]:
            continue
        hadoop = _hadoop_parts(spark, text)
        try:
            location = CheckpointLocation.parse(text)
        except CheckpointLocationError:
            assert hadoop is None or (hadoop[0] is None and hadoop[1] is not None), text
            continue
        if hadoop is None:
            continue  # Java refused the authority: Spark stops before the sink
        ours = (location.scheme, location.authority, location.path)
        assert ours[:2] == hadoop[:2] and ours[2] == (hadoop[2].rstrip("/") or hadoop[2]), text
        compared += 1
    assert compared > 300
