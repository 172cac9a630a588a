"""The checkpoint filesystem layer: locations parsed as Hadoop's Path, the filesystem options,
what each scheme is read through, local reads, the offset log, and WebHDFS's error answers.

Reading from a real HDFS and Spark's own parsing of the same texts are in
tests/integration/test_checkpoint_fs.py.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore.connectors.spark.checkpoint_fs import (
    Backend,
    CheckpointLocation,
    CheckpointLocationError,
    CheckpointReadError,
    QueryCheckpoint,
)
from spark_statestore.connectors.spark.checkpoint_fs.filesystems import (
    check_readable,
    pyarrow_filesystem,
    s3_arguments,
)
from spark_statestore.connectors.spark.checkpoint_fs.query_checkpoint import parse_offset_log
from spark_statestore.connectors.spark.checkpoint_fs.settings import (
    FilesystemSettings,
    S3Settings,
    parse_http_addresses,
)
from spark_statestore.connectors.spark.checkpoint_fs.webhdfs import read_webhdfs
from spark_statestore.connectors.spark.options import parse_sink_options
from spark_statestore.errors import OptionError


def sink(checkpoint: str, **options: str) -> Any:
    return parse_sink_options(
        {"path": "/s", "checkpointLocation": checkpoint, **options}, streaming=True
    )


# -- locations --------------------------------------------------------------------------------
# (text, (scheme, authority, path)): what Hadoop 3.5's Path gives (checked against it in the
# integration test), the scheme lower-cased.
HADOOP_CASES = [
    ("/tmp/a%20b", (None, None, "/tmp/a%20b")),  # no percent-decoding
    ("file:///tmp/a%20b", ("file", None, "/tmp/a%20b")),
    ("file:/tmp/x y", ("file", None, "/tmp/x y")),
    ("file://localhost/tmp/x", ("file", "localhost", "/tmp/x")),
    ("hdfs://nn:8020/a/../b//c/", ("hdfs", "nn:8020", "/b/c")),
    ("s3a://bucket/k?x#y", ("s3a", "bucket", "/k?x#y")),  # no query, no fragment
    ("rel/dir", (None, None, "rel/dir")),
    ("HDFS://NN/x", ("hdfs", "NN", "/x")),
    ("hdfs://nn", ("hdfs", "nn", "")),
    ("hdfs:///x", ("hdfs", None, "/x")),
    ("/tmp/./x/.", (None, None, "/tmp/x")),
    ("s3a://b/../../x", ("s3a", "b", "/../../x")),
    ("x:/y:z", ("x", None, "/y:z")),
    ("/tmp/a:b", (None, None, "/tmp/a:b")),
    ("./a:b", (None, None, "./a:b")),
    ("file:c:/x", ("file", None, "/c:/x")),
    ("abfss://c@a.dfs.core.windows.net/cp", ("abfss", "c@a.dfs.core.windows.net", "/cp")),
]


@pytest.mark.parametrize(("text", "parts"), HADOOP_CASES, ids=[c[0] for c in HADOOP_CASES])
def test_a_location_is_read_as_hadoops_path_reads_it(
    text: str, parts: tuple[str | None, str | None, str]
) -> None:
    location = CheckpointLocation.parse(text)
    assert (location.scheme, location.authority, location.path) == parts
    assert CheckpointLocation.parse(str(location)) == location


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a:b/c", "the relative path 'b/c' after scheme 'a'"),
        ("file:", "nothing after scheme 'file'"),
        ("1x:/y", "'1x' before the first ':' is not a URI scheme"),
        ("f?le:/x", "is not a URI scheme"),  # Hadoop: the relative path 'f' with a query
        ("//host/x", "has no scheme"),
    ],
)
def test_a_malformed_location_names_the_option(text: str, says: str) -> None:
    with pytest.raises(CheckpointLocationError, match="option 'checkpointLocation'") as caught:
        CheckpointLocation.parse(text)
    assert says in str(caught.value)
    with pytest.raises(OptionError, match=says.replace("(", r"\(")):
        sink(text)  # an OptionError when the options are parsed


_LOCATION_PIECES = [*"abcAZ09:/.%?#@[]- +", "é", "\u2028", "//", "..", "hdfs:", "s3a://"]
_LOCATION_TEXT = st.lists(st.sampled_from(_LOCATION_PIECES), min_size=1, max_size=20).map("".join)


@settings(max_examples=400, deadline=None)
@given(_LOCATION_TEXT)
def test_every_text_is_a_location_or_an_option_error_and_round_trips(text: str) -> None:
    try:
        location = CheckpointLocation.parse(text)
    except CheckpointLocationError:
        return
    assert CheckpointLocation.parse(str(location)) == location
    assert "//" not in location.path and "/./" not in f"{location.path}/"
    if location.scheme is not None:
        assert location.path.startswith("/") or (location.path == "" and location.authority)
    child = location.child("offsets", "7")
    assert str(child).endswith("offsets/7")
    assert CheckpointLocation.parse(str(child)) == child


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", ""]), max_size=8))
def test_dot_segments_resolve_as_a_stack(segments: list[str]) -> None:
    expected: list[str] = []
    for segment in segments:
        if segment == ".." and expected and expected[-1] != "..":
            expected.pop()
        elif segment not in ("", "."):
            expected.append(segment)
    location = CheckpointLocation.parse("hdfs://nn/" + "/".join(segments))
    assert location.path == "/" + "/".join(expected)


def test_the_default_filesystem_qualifies_plain_paths() -> None:
    hdfs = CheckpointLocation.parse("hdfs://nn:8020")
    assert str(CheckpointLocation.parse("/cp/q").qualified(hdfs)) == "hdfs://nn:8020/cp/q"
    assert str(CheckpointLocation.parse("hdfs:///cp").qualified(hdfs)) == "hdfs://nn:8020/cp"
    assert str(CheckpointLocation.parse("s3a://b/cp").qualified(hdfs)) == "s3a://b/cp"
    local = CheckpointLocation.parse("file:///")
    assert CheckpointLocation.parse("rel").qualified(local).path == "rel"
    with pytest.raises(CheckpointLocationError, match=re.escape("relative, and fs.defaultFS")):
        CheckpointLocation.parse("rel").qualified(hdfs)
    options = sink("/cp/q", **{"fs.defaultFS": "hdfs://nn:8020"})
    assert str(options.checkpoint.location) == "hdfs://nn:8020/cp/q"
    with pytest.raises(CheckpointLocationError, match=re.escape("'fs.defaultFS' 'nn:8020'")):
        sink("/cp/q", **{"fs.defaultFS": "nn:8020"})


# -- what reads which scheme -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("/tmp/cp", Backend.LOCAL),
        ("file:///tmp/cp", Backend.LOCAL),
        ("file://localhost/tmp/cp", Backend.LOCAL),
        ("hdfs://nn:8020/cp", Backend.WEBHDFS),
        ("webhdfs://nn:9870/cp", Backend.WEBHDFS),
        ("swebhdfs://nn/cp", Backend.WEBHDFS),
        ("s3a://bucket/cp", Backend.S3),
        ("s3://bucket/cp", Backend.S3),
        ("S3N://bucket/cp", Backend.S3),
        ("gs://bucket/cp", Backend.GCS),
        ("abfss://c@acct.dfs.core.windows.net/cp", Backend.AZURE),
        ("abfs://c@acct.dfs.core.windows.net/cp", Backend.AZURE),
    ],
)
def test_each_readable_scheme_has_its_filesystem(text: str, backend: Backend) -> None:
    options = sink(text)
    assert options.checkpoint is not None
    assert check_readable(options.checkpoint.location, options.checkpoint.settings) is backend


@pytest.mark.parametrize("scheme", ["viewfs", "o3fs", "oss", "wasbs", "dbfs", "ftp", "har"])
def test_another_scheme_fails_when_the_options_are_parsed(scheme: str) -> None:
    with pytest.raises(CheckpointLocationError) as caught:
        sink(f"{scheme}://somewhere/cp/orders")
    message = str(caught.value)
    assert "option 'checkpointLocation'" in message and f"scheme {scheme!r}" in message
    assert "It reads a local path or file:, hdfs:" in message  # and what to do
    assert "Checkpoint locations" in message


def test_spark_gets_the_error_when_it_asks_for_the_streaming_writer() -> None:
    """Spark builds the writer on the driver as the query starts, before any task runs."""
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_statestore.connectors.spark.datasource import StateStoreDataSource

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    source = StateStoreDataSource({"path": "/s", "checkpointLocation": "viewfs://c/cp"})
    with pytest.raises(CheckpointLocationError, match="cannot read scheme 'viewfs'"):
        source.streamWriter(schema, False)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("file://otherhost/cp", "names host 'otherhost'"),
        ("s3a:///cp", "does not name the bucket"),
        ("hdfs:///cp", "does not name the NameNode"),
        ("abfss://acct.dfs.core.windows.net/cp", "names container@account"),
    ],
)
def test_a_location_missing_its_host_or_bucket_is_refused(text: str, says: str) -> None:
    with pytest.raises(CheckpointLocationError, match=says):
        sink(text)


def test_an_hdfs_location_without_host_takes_the_namenode_address_option() -> None:
    options = sink("hdfs:///cp", **{"dfs.namenode.http-address": "nn1:9870,nn2:9870"})
    assert options.checkpoint.settings.namenode_http_addresses == ("nn1:9870", "nn2:9870")


def test_filesystem_options_are_the_streaming_sinks_only() -> None:
    with pytest.raises(OptionError, match=re.escape("unknown option 'fs.s3a.endpoint'")):
        parse_sink_options({"path": "/s", "fs.s3a.endpoint": "h:1"}, streaming=False)
    with pytest.raises(OptionError, match=re.escape("did you mean 'fs.s3a.endpoint'")):
        sink("s3a://b/cp", **{"fs.s3a.endpiont": "h:1"})


@pytest.mark.parametrize("text", ["nn", "nn:", ":9870", "nn:99999", "nn:0", "nn:9870,", "a/b:1"])
def test_a_namenode_address_is_host_and_port(text: str) -> None:
    with pytest.raises(CheckpointLocationError, match=r"'dfs\.namenode\.http-address'.*host:port"):
        parse_http_addresses(text)
    assert parse_http_addresses(" nn1:9870 , [::1]:50070") == ("nn1:9870", "[::1]:50070")


# -- S3 settings -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "arguments"),
    [
        ({}, {}),
        (
            {"fs.s3a.endpoint": "http://minio.local:9000/", "fs.s3a.path.style.access": "true"},
            {
                "endpoint_override": "minio.local:9000",
                "scheme": "http",
                "force_virtual_addressing": False,
            },
        ),
        (
            {
                "fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com",
                "fs.s3a.endpoint.region": "eu-west-1",
            },
            {
                "endpoint_override": "s3.eu-west-1.amazonaws.com",
                "scheme": "https",
                "force_virtual_addressing": True,  # S3A's default: virtual hosts
                "region": "eu-west-1",
            },
        ),
        (
            {"fs.s3a.endpoint": "objects:9000", "fs.s3a.connection.ssl.enabled": "false"},
            {
                "endpoint_override": "objects:9000",
                "scheme": "http",
                "force_virtual_addressing": True,
            },
        ),
        (
            {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK", "fs.s3a.session.token": "T"},
            {"access_key": "AK", "secret_key": "SK", "session_token": "T"},
        ),
    ],
)
def test_s3a_options_become_pyarrow_s3_arguments(
    options: dict[str, str], arguments: dict[str, Any]
) -> None:
    parsed = sink("s3a://bucket/cp", **options)
    assert s3_arguments(parsed.checkpoint.settings.s3) == arguments
    import pyarrow.fs

    pyarrow.fs.S3FileSystem(**arguments)  # pyarrow takes them


@pytest.mark.parametrize(
    ("text", "kind", "path"),
    [
        ("s3a://bucket/cp/metadata", "S3FileSystem", "bucket/cp/metadata"),
        ("gs://bucket/cp/metadata", "GcsFileSystem", "bucket/cp/metadata"),
        ("abfss://c@acct.dfs.core.windows.net/cp/metadata", "AzureFileSystem", "c/cp/metadata"),
    ],
)
def test_object_stores_open_the_pyarrow_filesystem_at_bucket_and_key(
    text: str, kind: str, path: str
) -> None:
    location = CheckpointLocation.parse(text)
    assert location.backend is not None
    filesystem, inside = pyarrow_filesystem(location.backend, location, FilesystemSettings())
    assert (type(filesystem).__name__, inside) == (kind, path)  # made without a request


def test_s3_keys_go_in_pairs_and_stay_out_of_reprs() -> None:
    with pytest.raises(
        CheckpointLocationError, match=re.escape("'fs.s3a.access.key' needs its pair")
    ):
        sink("s3a://b/cp", **{"fs.s3a.access.key": "AK"})
    parsed = sink("s3a://b/cp", **{"fs.s3a.access.key": "AK1", "fs.s3a.secret.key": "SECRET2"})
    shown = repr(parsed.checkpoint)
    assert "AK1" not in shown and "SECRET2" not in shown
    assert parsed.checkpoint.settings.s3 == S3Settings(access_key="AK1", secret_key="SECRET2")


# -- reading local checkpoints -----------------------------------------------------------------
def make_checkpoint(
    directory: Path, query_id: str = "6b1f2c4e-0000-4000-8000-000000000001"
) -> Path:
    (directory / "offsets").mkdir(parents=True)
    (directory / "metadata").write_text(json.dumps({"id": query_id}))
    (directory / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"logOffset":0}\n-\n{"t":{"0":5}}'
    )
    return directory


@pytest.mark.parametrize("form", ["path", "file:", "file://", "file://localhost"])
def test_a_local_checkpoint_is_read_in_every_form(tmp_path: Path, form: str) -> None:
    directory = make_checkpoint(tmp_path / "a b%20c#d?e")  # literal characters, as Hadoop's
    text = str(directory) if form == "path" else f"{form}{directory}"
    checkpoint = sink(text).checkpoint
    assert checkpoint.query_id() == "6b1f2c4e-0000-4000-8000-000000000001"
    assert checkpoint.source_offsets(0) == [{"logOffset": 0}, "-", {"t": {"0": 5}}]


def test_a_missing_or_broken_checkpoint_says_which_file(tmp_path: Path) -> None:
    checkpoint = QueryCheckpoint(CheckpointLocation.parse(str(tmp_path)), FilesystemSettings())
    with pytest.raises(CheckpointReadError, match="driver's local disk") as caught:
        checkpoint.query_id()
    assert caught.value.missing and f"{tmp_path}/metadata does not exist" in str(caught.value)
    with pytest.raises(CheckpointReadError, match="offsets of batch 3") as caught:
        checkpoint.source_offsets(3)
    assert caught.value.missing
    for content in ("", "[]", '{"id": 7}', "{", "[" * 100_000, b"\xff"):
        path = tmp_path / "metadata"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        with pytest.raises(CheckpointReadError) as caught:
            checkpoint.query_id()
        assert "metadata" in str(caught.value) and not caught.value.missing


def test_offset_log_lines_end_as_spark_reads_them() -> None:
    entry = 'v1\r\n{"batchWatermarkMs":0}\r\n{"s":"a\u2028b"}\r-\n{"n":1}\n'
    assert parse_offset_log(entry) == [{"s": "a\u2028b"}, "-", {"n": 1}]
    assert parse_offset_log("v1\n{}") == []
    assert parse_offset_log("v1\n{}\n" + "[" * 100_000) == ["[" * 100_000]


# -- WebHDFS answers -------------------------------------------------------------------------
class _Answers(http.server.BaseHTTPRequestHandler):
    """A NameNode's error answers, as Hadoop's WebHDFS sends them (status + RemoteException)."""

    answers: dict[str, tuple[int, str]] = {}

    def do_GET(self) -> None:
        status, exception = self.answers[self.server.server_address[1]]  # type: ignore[index]
        body = json.dumps({"RemoteException": {"exception": exception, "message": "m"}})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def namenode() -> Iterator[Any]:
    servers = []

    def start(status: int, exception: str) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
        _Answers.answers[server.server_address[1]] = (status, exception)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_webhdfs_errors_are_classified(namenode: Any) -> None:
    with pytest.raises(CheckpointReadError, match="Kerberos"):
        read_webhdfs([namenode(401, "")], "/cp/metadata", shown="hdfs://nn/cp/metadata")
    with pytest.raises(CheckpointReadError, match="does not exist") as caught:
        read_webhdfs([namenode(404, "FileNotFoundException")], "/x", shown="x")
    assert caught.value.missing
    with pytest.raises(CheckpointReadError, match=r"HTTP 403 \(AccessControlException"):
        read_webhdfs([namenode(403, "AccessControlException")], "/x", shown="x")
    standby = namenode(403, "StandbyException")
    with pytest.raises(
        CheckpointReadError, match=r"standby.*dfs\.namenode\.http-address"
    ) as caught:
        read_webhdfs([standby, "http://127.0.0.1:9"], "/x", shown="x")  # port 9: nobody
    assert not caught.value.missing
