"""The integer flags of ``spark-statestore`` take ASCII digits only (no broker, no JVM)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_statestore.changelog.missing_position import OnMissingPosition
from spark_statestore.cli import build_parser
from spark_statestore.connectors.kafka.errors import LocalKafkaError
from spark_statestore.connectors.kafka.local import parse_topic_spec

FLAGS = [
    ["broker", "--brokers"],
    ["follow", "--bootstrap-servers", "b:9092", "--changelog", "c", "/s", "--chunk-records"],
    ["bench", "--rounds"],
    ["bench", "--records"],
    ["serve", "/s", "--port"],
    ["query", "/s", "--all", "--max-lag"],
    ["query", "/s", "--all", "--limit"],
    ["query", "/s", "--all", "--as-of"],
]


@pytest.mark.parametrize("flag", FLAGS, ids=lambda flag: flag[-1])
@pytest.mark.parametrize("text", ["\u0663", "\uff13", "\u00b2", "+3", "3_0", " 3"])
def test_integer_flags_refuse_what_is_not_ascii_digits(
    flag: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*flag, text])
    assert exited.value.code == 2
    assert f"argument {flag[-1]}: {text!r} is not an integer written in ASCII digits" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("flag", FLAGS, ids=lambda flag: flag[-1])
def test_integer_flags_take_ascii_digits(flag: list[str]) -> None:
    args = build_parser().parse_args([*flag, "12"])
    assert 12 in vars(args).values()


@pytest.mark.parametrize("count", ["\u0663", "\uff13", "\u00b2", "+3", "0", "-1", ""])
def test_topic_specs_take_an_ascii_partition_count(count: str) -> None:
    with pytest.raises(LocalKafkaError, match="PARTITIONS in ASCII digits >= 1"):
        parse_topic_spec(f"orders:{count}")
    assert parse_topic_spec("orders:3") == ("orders", 3) and parse_topic_spec("a") == ("a", 1)


TAIL = ["tail", "--bootstrap-servers", "b:9092", "--changelog", "c"]


def test_tail_takes_the_missing_position_policy_as_the_spark_option_spells_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before, the flag took error|skip while the Spark option takes fail|skip.
    assert build_parser().parse_args(TAIL).on_missing_position is OnMissingPosition.FAIL
    for text, policy in (("fail", OnMissingPosition.FAIL), ("skip", OnMissingPosition.SKIP)):
        args = build_parser().parse_args([*TAIL, "--on-missing-position", text])
        assert args.on_missing_position is policy
    assert capsys.readouterr().err == ""
    # "error" was documented in the README: still taken, with a warning.
    args = build_parser().parse_args([*TAIL, "--on-missing-position", "error"])
    assert args.on_missing_position is OnMissingPosition.FAIL
    assert "--on-missing-position error is deprecated: use fail" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*TAIL, "--on-missing-position", "skp"])
    assert exited.value.code == 2
    assert "unknown value 'skp'; did you mean 'skip'?" in capsys.readouterr().err


FOLLOW = ["follow", "--bootstrap-servers", "b:9092", "--changelog", "c", "/s"]


def test_follow_takes_a_leader_application_id_and_refuses_it_with_partitions() -> None:
    from spark_statestore.cli.follow import FollowOptions
    from spark_statestore.errors import OptionError

    args = build_parser().parse_args([*FOLLOW, "--leader-application-id", "orders-app"])
    assert args.leader_application_id == "orders-app"
    options = FollowOptions.from_cli(
        bootstrap_servers="b:9092", changelog="c", path="/s", leader_application_id="orders-app"
    )
    assert options.leader_application_id == "orders-app"
    assert (
        FollowOptions.from_cli(
            bootstrap_servers="b:9092", changelog="c", path="/s"
        ).leader_application_id
        is None
    )
    # As the Spark source's leaderApplicationId: the leader's offsets cover every partition.
    with pytest.raises(OptionError, match="--leader-application-id needs a follower of every"):
        FollowOptions.from_cli(
            bootstrap_servers="b:9092",
            changelog="c",
            path="/s",
            partitions="0,1",
            leader_application_id="orders-app",
        )
    with pytest.raises(OptionError, match=r"not a valid Kafka Streams application\.id"):
        FollowOptions.from_cli(
            bootstrap_servers="b:9092", changelog="c", path="/s", leader_application_id="a b"
        )


# -- serve, inspect, lag, query ------------------------------------------------------------------


def test_follow_takes_the_leaders_topology_file_or_upstream_topics(tmp_path: Path) -> None:
    from spark_statestore.cli.follow import FollowOptions
    from spark_statestore.errors import OptionError

    described = tmp_path / "topology.txt"
    text = (Path(__file__).parent / "topologies" / "regroup.txt").read_text()
    described.write_text(text)
    args = build_parser().parse_args(
        [*FOLLOW, "--leader-application-id", "app", "--leader-topology", str(described)]
    )
    assert args.leader_topology == str(described)
    common = {"bootstrap_servers": "b:9092", "path": "/s", "leader_application_id": "app"}
    options = FollowOptions.from_cli(
        changelog="app-regroup-changelog", leader_topology=str(described), **common
    )
    assert options.leader_topology == text
    options = FollowOptions.from_cli(
        changelog="app-regroup-changelog", leader_upstream_topics="a, b", **common
    )
    assert options.leader_upstream_topics == ("a", "b")
    with pytest.raises(OptionError, match=r"--leader-topology .*no store 'totals2'"):
        FollowOptions.from_cli(
            changelog="app-totals2-changelog", leader_topology=str(described), **common
        )
    with pytest.raises(OptionError, match=r"--leader-topology: cannot read"):
        FollowOptions.from_cli(
            changelog="app-regroup-changelog", leader_topology=str(tmp_path / "no"), **common
        )
    with pytest.raises(OptionError, match=r"--leader-upstream-topics needs"):
        FollowOptions.from_cli(
            bootstrap_servers="b:9092", path="/s", changelog="c", leader_upstream_topics="a"
        )
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            [*FOLLOW, "--leader-topology", "f", "--leader-upstream-topics", "a"]
        )


def test_query_needs_exactly_one_of_key_range_prefix_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["query", "/s"], ["query", "/s", "--all", "--prefix", "a"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "one of the arguments --key --range --prefix --all is required" in err
    assert "argument --prefix: not allowed with argument --all" in err
    args = build_parser().parse_args(["query", "/s", "--key", "a", "--key", "b"])
    assert args.key == ["a", "b"] and args.range is None and not args.all


def test_query_options_turn_keys_into_stored_bytes() -> None:
    from spark_statestore.cli.query_types import QueryOptions
    from spark_statestore.store.scan import ScanSpec

    def scan(**kwargs: object) -> ScanSpec:
        return QueryOptions.from_cli(store="/s", **kwargs).scan  # type: ignore[arg-type]

    assert scan(keys=["b", "a"]) == ScanSpec.for_keys([b"a", b"b"])
    assert scan(keys=["-2"], key_format="long") == ScanSpec.for_keys([b"\xff" * 7 + b"\xfe"])
    assert scan(keys=["7"], key_format="int") == ScanSpec.for_keys([b"\x00\x00\x00\x07"])
    assert scan(keys=["0a1B"], key_format="binary") == ScanSpec.for_keys([b"\n\x1b"])
    assert scan(keys=["1.5"], key_format="double") == ScanSpec.for_keys([b"?\xf8" + bytes(6)])
    assert scan(key_range=["a", "m"]) == ScanSpec.between(b"a", b"m")
    assert scan(prefix="ab") == ScanSpec.with_prefix(b"ab")
    assert scan() == ScanSpec.everything()
    assert scan(limit=5, as_of=9) == ScanSpec(limit=5, as_of=9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": ["x"], "key_format": "long"}, "--key: 'x' is not a key of --key-format long"),
        ({"keys": ["\u0663"], "key_format": "int"}, "is not a key of --key-format int"),
        ({"keys": [str(2**31)], "key_format": "int"}, "32-bit signed"),
        ({"keys": ["zz"], "key_format": "binary"}, "option --key: 'zz' is not hex"),
        ({"keys": ["nan"], "key_format": "double"}, "is not a decimal number"),
        ({"key_range": ["-1", "5"], "key_format": "long"}, "negative numbers sort after"),
        ({"prefix": "1", "key_format": "long"}, "option --prefix: a prefix of long keys"),
        ({"position_bound": '{"orders": 1}'}, "option --position-bound:"),
        ({"position_bound": "not json"}, "option --position-bound:"),
        ({"max_lag": -1}, "option --max-lag must be >= 0"),
        ({"limit": -1}, "option --limit must be >= 0"),
        ({"value_format": "json"}, "option --value-schema"),
        ({"value_schema": "id INT"}, "option --value-schema"),
        ({"key_format": "json"}, "option --key-format"),
        ({"kafka": ["bootstrap.servers=x"]}, "set bootstrap.servers with --bootstrap-servers"),
        ({"schema_registry_url": "http://r"}, "option --schema-registry-url is for --key-format"),
        ({"value_subject": "s"}, "option --value-subject is for --key-format"),
        ({"format_options": ["keySubject=s"]}, "option --format-option is for --key-format"),
        ({"key_format": "avro", "key_range": ["a", "b"]}, "option --range: avro keys are not"),
        ({"key_format": "avro", "prefix": "a"}, "option --prefix: avro keys are not stored"),
        ({"key_format": "avro"}, "keyFormat avro reads values framed with a schema id"),
        (
            {"key_format": "avro", "format_options": ["keySchemaVersoin=2"]},
            "unknown option 'keyschemaversoin' for the spark_statestore snapshot reader; "
            "did you mean 'keySchemaVersion'",
        ),
        (
            {"key_format": "avro", "format_options": ["keySchemaId"]},
            "option --format-option: expected KEY=VALUE",
        ),
    ],
)
def test_query_options_refuse_bad_arguments_naming_the_flag(
    kwargs: dict[str, object], message: str
) -> None:
    from spark_statestore.cli.query_types import QueryOptions
    from spark_statestore.errors import OptionError

    with pytest.raises(OptionError, match=re.escape(message)):
        QueryOptions.from_cli(store="/s", **kwargs)  # type: ignore[arg-type]


def test_query_options_parse_the_bound_and_formats() -> None:
    from spark_statestore import Position, PositionBound
    from spark_statestore.cli.query_types import QueryOptions

    args = build_parser().parse_args(
        [
            "query",
            "/s",
            "--all",
            "--json",
            "--position-bound",
            '{"orders": {"0": 41}}',
            "--position-bound-timeout",
            "2.5",
            "--value-format",
            "json",
            "--value-schema",
            "id INT",
        ]
    )
    options = QueryOptions.from_cli(
        store=args.store,
        value_format=args.value_format,
        value_schema=args.value_schema,
        as_json=args.json,
        position_bound=args.position_bound,
        position_bound_timeout=args.position_bound_timeout,
    )
    assert options.position_bound == PositionBound.at(Position.from_map({"orders": {0: 41}}))
    assert options.bound_timeout_s == 2.5 and options.output == "json"


def test_serve_refuses_beyond_loopback_without_tls_and_half_a_tls_pair(tmp_path: Path) -> None:
    from spark_statestore.cli.serve import ServeOptions
    from spark_statestore.errors import OptionError

    assert ServeOptions.from_cli(path="/s", host="::1").host == "::1"
    with pytest.raises(
        OptionError, match=r"option --host 0\.0\.0\.0: serving beyond loopback needs"
    ):
        ServeOptions.from_cli(path="/s", host="0.0.0.0")
    with pytest.raises(OptionError, match="--tls-cert and --tls-key go together"):
        ServeOptions.from_cli(path="/s", tls_cert="c.pem")
    with pytest.raises(OptionError, match="option --tls-key: cannot read"):
        (tmp_path / "c.pem").write_bytes(b"PEM")
        ServeOptions.from_cli(
            path="/s", tls_cert=str(tmp_path / "c.pem"), tls_key=str(tmp_path / "missing")
        )
    with pytest.raises(OptionError, match="option --port must be in 0-65535"):
        ServeOptions.from_cli(path="/s", port=70000)
    pem = ServeOptions.from_cli(
        path="/s",
        host="10.0.0.1",
        tls_cert=str(tmp_path / "c.pem"),
        tls_key=str(tmp_path / "c.pem"),
    )
    assert pem.tls_certificates == (b"PEM", b"PEM")
    (tmp_path / "token").write_text("a-token-of-the-replicas\n")
    shared = ServeOptions.from_cli(
        path="/s", token_file=str(tmp_path / "token"), bootstrap_servers="b:9092"
    )
    assert shared.token == "a-token-of-the-replicas" and shared.bootstrap_servers == "b:9092"
    assert shared.kafka_config["log_level"] == "0"
    with pytest.raises(OptionError, match="option --token-file: cannot read"):
        ServeOptions.from_cli(path="/s", token_file=str(tmp_path / "missing"))


def test_a_store_is_a_directory_or_a_location_with_its_token(tmp_path: Path) -> None:
    from spark_statestore.cli.store_state import StoreTarget
    from spark_statestore.errors import OptionError

    assert StoreTarget.from_cli("rel").path == str(Path("rel").resolve())
    token = tmp_path / "token"
    token.write_text("t0k3n-of-the-server\n")
    target = StoreTarget.from_cli("grpc+tcp://h:1", token_file=str(token))
    assert (target.path, target.location, target.token) == (
        None,
        "grpc+tcp://h:1",
        token.read_text().strip(),
    )
    with pytest.raises(OptionError, match="is a location: give its server's token"):
        StoreTarget.from_cli("grpc+tcp://h:1")
    with pytest.raises(OptionError, match="go with a location, not a store directory"):
        StoreTarget.from_cli("/s", token_file=str(token))
    with pytest.raises(OptionError, match=r"option --token-file: .* is empty"):
        (tmp_path / "empty").write_text("\n")
        StoreTarget.from_cli("grpc+tcp://h:1", token_file=str(tmp_path / "empty"))
    with pytest.raises(OptionError, match="option --tls-root-cert: cannot read"):
        StoreTarget.from_cli("grpc+tls://h:1", token_file=str(token), tls_root_cert="/nope")


def test_lag_takes_a_store_or_a_changelog_with_its_brokers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from spark_statestore.cli import main

    assert main(["lag"]) == 2
    assert main(["lag", "/s", "--changelog", "c"]) == 2
    assert "give one of STORE and --changelog TOPIC" in capsys.readouterr().err
    assert main(["lag", "--changelog", "c"]) == 2
    assert "lag --changelog: give --bootstrap-servers" in capsys.readouterr().err


def test_query_takes_a_store_or_a_changelog_with_its_brokers_and_token(tmp_path: Path) -> None:
    from spark_statestore.cli.query_types import QueryOptions
    from spark_statestore.errors import OptionError

    with pytest.raises(OptionError, match="give one of STORE and --changelog TOPIC"):
        QueryOptions.from_cli(store=None)
    with pytest.raises(OptionError, match="give one of STORE and --changelog TOPIC"):
        QueryOptions.from_cli(store="/s", changelog="c")
    with pytest.raises(OptionError, match="query --changelog: give --bootstrap-servers"):
        QueryOptions.from_cli(store=None, changelog="c")
    with pytest.raises(OptionError, match="--changelog: give the replicas' token"):
        QueryOptions.from_cli(store=None, changelog="c", bootstrap_servers="b:9092")
    (tmp_path / "token").write_text("shared-token-of-the-replicas")
    options = QueryOptions.from_cli(
        store=None, changelog="c", bootstrap_servers="b:9092", token_file=str(tmp_path / "token")
    )
    assert options.target.changelog == "c" and options.target.name == "the replicas of c"
