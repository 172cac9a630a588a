"""The embedded broker: cross-process traffic, transactions under read_committed, faults."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spark_statestore.connectors.kafka.embedded import ApiKey, EmbeddedBroker
from tests.conftest import REPO_ROOT, run_python

pytestmark = pytest.mark.integration

Record = tuple[int, bytes | None, bytes | None]


def consume_all(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    isolation: str = "read_committed",
    deadline_s: float = 30,
) -> list[Record]:
    """Read a partition from offset 0 until partition EOF; returns (offset, key, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[Record] = []
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                err = msg.error()
                if err is None:
                    out.append((msg.offset(), msg.key(), msg.value()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    return out
                else:
                    raise KafkaException(err)
        raise AssertionError(f"no EOF on {topic}-{partition} within {deadline_s}s; got {out}")
    finally:
        consumer.close()


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    return producer


def high_watermark(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "wm", "isolation.level": isolation}
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
    finally:
        consumer.close()


def test_cross_process_produce_and_consume(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=4)
    # One child produces, another child consumes: the broker is reachable from any process.
    run_python(
        """
        import sys
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": sys.argv[1]})
        for i in range(100):
            p.produce(sys.argv[2], value=b"v%d" % i, key=b"k%d" % i, partition=i % 4,
                      headers=[("v", b"\\x00")])
        assert p.flush(30) == 0
        """,
        kafka_broker.bootstrap_servers,
        topic,
    )
    child = run_python(
        """
        import json, sys
        from confluent_kafka import Consumer, TopicPartition, KafkaError
        c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "x",
                      "enable.partition.eof": True})
        c.assign([TopicPartition(sys.argv[2], p, 0) for p in range(4)])
        seen, eof = [], set()
        while len(eof) < 4:
            for m in c.consume(100, 1.0):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    eof.add(m.partition())
                else:
                    seen.append([m.partition(), m.key().decode(), m.value().decode(),
                                 m.headers()[0][0]])
        print(json.dumps(seen))
        """,
        kafka_broker.bootstrap_servers,
        topic,
    )
    seen = json.loads(child.stdout)
    assert sorted((k, v) for _, k, v, _ in seen) == sorted((f"k{i}", f"v{i}") for i in range(100))
    assert all(p == int(k[1:]) % 4 and h == "v" for p, k, _, h in seen)


def test_committed_visible_aborted_invisible_under_read_committed(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    bootstrap = kafka_broker.bootstrap_servers
    producer = txn_producer(bootstrap, f"{topic}-txn")
    producer.begin_transaction()
    producer.produce(topic, b"committed-1", b"a", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", b"b", partition=0)
    producer.flush(30)  # make sure the aborted record really reached the log
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-2", b"c", partition=0)
    producer.commit_transaction(30)

    uncommitted = [v for _, _, v in consume_all(bootstrap, topic, isolation="read_uncommitted")]
    committed = [v for _, _, v in consume_all(bootstrap, topic)]
    assert uncommitted == [b"committed-1", b"aborted", b"committed-2"]
    assert committed == [b"committed-1", b"committed-2"]


def test_open_transaction_holds_back_read_committed_at_the_lso(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    bootstrap = kafka_broker.bootstrap_servers
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"before", b"k", partition=0)
    plain.flush(30)
    producer = txn_producer(bootstrap, f"{topic}-txn")
    producer.begin_transaction()
    producer.produce(topic, b"open", b"k", partition=0)
    producer.flush(30)
    # A non-transactional record after the open transaction must wait for it as well.
    plain.produce(topic, b"after", b"k", partition=0)
    plain.flush(30)

    assert high_watermark(bootstrap, topic, "read_uncommitted") == 3
    assert high_watermark(bootstrap, topic, "read_committed") == 1  # the LSO
    assert [v for _, _, v in consume_all(bootstrap, topic)] == [b"before"]

    producer.commit_transaction(30)
    assert [v for _, _, v in consume_all(bootstrap, topic)] == [b"before", b"open", b"after"]
    assert high_watermark(bootstrap, topic, "read_committed") == 4  # past the commit marker


def test_new_producer_fences_and_aborts_the_zombie_transaction(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    bootstrap = kafka_broker.bootstrap_servers
    zombie = txn_producer(bootstrap, f"{topic}-txn")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", b"k", partition=0)
    zombie.flush(30)
    # The zombie "crashes" here: a new instance with the same transactional.id takes over.
    successor = txn_producer(bootstrap, f"{topic}-txn")
    successor.begin_transaction()
    successor.produce(topic, b"successor", b"k", partition=0)
    successor.commit_transaction(30)

    assert [v for _, _, v in consume_all(bootstrap, topic)] == [b"successor"]
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or not fenced.value.args[0].retriable()


def test_interleaved_transactions_random_outcomes(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """Several transactional producers interleave on one partition; only commits survive."""
    topic = make_topic()
    bootstrap = kafka_broker.bootstrap_servers
    rng = random.Random(20261121)
    producers = [txn_producer(bootstrap, f"{topic}-p{i}") for i in range(3)]
    open_values: dict[int, list[bytes]] = {}
    expected: list[bytes] = []
    plain = Producer({"bootstrap.servers": bootstrap})
    for step in range(60):
        i = rng.randrange(len(producers))
        producer = producers[i]
        action = rng.random()
        if i not in open_values:
            producer.begin_transaction()
            open_values[i] = []
        if action < 0.6:
            value = b"p%d-s%d" % (i, step)
            producer.produce(topic, value, b"k", partition=0)
            producer.flush(30)
            open_values[i].append(value)
        elif action < 0.8:
            producer.commit_transaction(30)
            expected.extend(open_values.pop(i))
        elif action < 0.9:
            producer.abort_transaction(30)
            open_values.pop(i)
        else:
            plain.produce(topic, b"plain-%d" % step, b"k", partition=0)
            plain.flush(30)
            expected.append(b"plain-%d" % step)
    for i in list(open_values):
        producers[i].commit_transaction(30)
        expected.extend(open_values.pop(i))

    got = [v for _, _, v in consume_all(bootstrap, topic)]
    # Order differs from commit order (records sit at their produce offsets); content must match.
    assert sorted(got) == sorted(expected)
    assert len(got) == len(expected)


def test_downed_broker_is_observed_and_recovers(make_topic: Callable[..., str]) -> None:
    # A private cluster: taking brokers down must not disturb other tests.
    with EmbeddedBroker(brokers=1) as kafka:
        kafka.create_topic("faults", 1)
        errors: list[KafkaError] = []
        producer = Producer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "error_cb": errors.append,
                "reconnect.backoff.max.ms": 200,
            }
        )
        producer.produce("faults", b"first", b"k")
        assert producer.flush(30) == 0

        kafka.broker_down()
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        assert errors, "the client never noticed the broker going down"
        assert {e.code() for e in errors} & {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}

        kafka.broker_up()
        delivered: list[KafkaError | None] = []
        producer.produce("faults", b"second", b"k", on_delivery=lambda e, _m: delivered.append(e))
        assert producer.flush(60) == 0
        assert delivered == [None]
        values = [v for _, _, v in consume_all(kafka.bootstrap_servers, "faults")]
        assert values == [b"first", b"second"]


def test_injected_request_error_reaches_the_client(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap_servers, "message.send.max.retries": 0}
    )
    producer.produce(topic, b"warmup", b"k", partition=0)
    assert producer.flush(30) == 0
    kafka_broker.push_request_errors(ApiKey.PRODUCE, [KafkaError.TOPIC_AUTHORIZATION_FAILED])
    outcome: list[KafkaError | None] = []
    producer.produce(
        topic, b"denied", b"k", partition=0, on_delivery=lambda e, _m: outcome.append(e)
    )
    producer.flush(30)
    assert len(outcome) == 1 and outcome[0] is not None
    assert outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_leader_move_is_followed_by_clients(
    kafka_broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    bootstrap = kafka_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"on-leader-1", b"k", partition=0)
    assert producer.flush(30) == 0
    kafka_broker.set_partition_leader(topic, 0, 2)
    producer.produce(topic, b"on-leader-2", b"k", partition=0)
    assert producer.flush(60) == 0
    kafka_broker.set_partition_leader(topic, 0, 3)
    values = [v for _, _, v in consume_all(bootstrap, topic)]
    assert values == [b"on-leader-1", b"on-leader-2"]


def test_rtt_injection_delays_responses(make_topic: Callable[..., str]) -> None:
    with EmbeddedBroker(brokers=1) as kafka:
        kafka.create_topic("slow", 1)
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "rtt"})
        consumer.get_watermark_offsets(TopicPartition("slow", 0), 10)  # connect first
        kafka.set_rtt(-1, 400)
        started = time.monotonic()
        consumer.get_watermark_offsets(TopicPartition("slow", 0), 10)
        # A lower bound only: the injected delay is a fact, not a performance claim.
        assert time.monotonic() - started >= 0.35
        consumer.close()


def test_broker_command_runs_standalone() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark_statestore.cli", "broker", "--topic", "t:8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("bootstrap.servers="), first
        bootstrap = first.split("=", 1)[1]
        assert proc.stdout.readline().strip() == "topic t partitions=8"
        # Another process uses the topic: every one of the 8 partitions takes a record.
        child = run_python(
            """
            import sys
            from confluent_kafka import Consumer, Producer, TopicPartition
            p = Producer({"bootstrap.servers": sys.argv[1]})
            for i in range(8):
                p.produce("t", b"x", partition=i)
            assert p.flush(30) == 0
            c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g"})
            md = c.list_topics("t", timeout=10).topics["t"]
            print(len(md.partitions),
                  [c.get_watermark_offsets(TopicPartition("t", i), 10)[1] for i in range(8)])
            """,
            bootstrap,
        )
        assert child.stdout.strip() == "8 [1, 1, 1, 1, 1, 1, 1, 1]"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
