"""The integer flags of ``spark-statestore`` take ASCII digits only (no broker, no JVM)."""

from __future__ import annotations

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
