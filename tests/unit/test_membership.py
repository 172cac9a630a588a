"""Signed membership (discovery/signing.py) and who gets credentials (discovery/trust.py).

Issue 25, findings 1 and 3: a forged ``role: leader`` announcement became the leader and was
sent the shared token; a ``grpc+unix://`` or a plain location on another host's loopback
was dialed with it too.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_statestore.discovery import AnnouncementError, DiscoveryError, ReplicaAnnouncement
from spark_statestore.discovery.records import (
    announcement_record,
    open_signed,
    signed_value,
    verified_announcement,
)
from spark_statestore.discovery.signing import DEFAULT_KEY_ENV, MembershipKey, MembershipKeys
from spark_statestore.discovery.trust import (
    UnverifiableReplicaError,
    dialable_location,
    loopback_identity,
)
from spark_statestore.store.manifest import Role

CHANGELOG = "app-store-changelog"
TOPIC = CHANGELOG + "-replicas"
KEY = MembershipKey.generate()
OTHER_KEY = MembershipKey.generate()


def announcement(**changes: Any) -> ReplicaAnnouncement:
    fields: dict[str, Any] = {
        "replica_id": "r1",
        "changelog": CHANGELOG,
        "role": Role.LEADER,
        "host": "host-a",
        "location": "grpc+tls://10.0.0.1:5001",
        "partitions": 4,
        "held_partitions": (0, 1, 2, 3),
        "heartbeat_ms": 1_000_000,
        "started_ms": 999_000,
    }
    fields.update(changes)
    return ReplicaAnnouncement(**fields)


def decode(value: bytes, keys: MembershipKeys | None = None, **where: Any) -> Any:
    return verified_announcement(
        value,
        keys=KEY.verifier() if keys is None else keys,
        topic=where.get("topic", TOPIC),
        record_key=where.get("record_key", b"r1"),
    )


# -- signatures -----------------------------------------------------------------------------
def test_a_signed_announcement_round_trips() -> None:
    original = announcement(withdrawn=True, loopback="boot/net:1")
    assert decode(announcement_record(original, KEY)) == original


def test_an_unsigned_announcement_is_refused() -> None:
    with pytest.raises(AnnouncementError, match="not signed"):
        decode(announcement().to_bytes())


def test_a_signature_under_an_unknown_key_is_refused() -> None:
    with pytest.raises(AnnouncementError, match="not among"):
        decode(announcement_record(announcement(), OTHER_KEY))


def test_an_altered_announcement_is_refused() -> None:
    envelope = json.loads(announcement_record(announcement(), KEY))
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload["role"] = "leader"
    payload["started_ms"] = 2**40  # the forged leader of finding 1 came "later"
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(AnnouncementError, match="does not verify"):
        decode(json.dumps(envelope).encode())


def test_a_signed_record_replayed_under_another_replica_id_or_topic_is_refused() -> None:
    value = announcement_record(announcement(), KEY)
    with pytest.raises(AnnouncementError, match="does not verify"):
        decode(value, record_key=b"r2")
    with pytest.raises(AnnouncementError, match="does not verify"):
        decode(value, topic="other-changelog-replicas")


def test_a_record_signed_for_a_key_holding_another_id_is_refused() -> None:
    """A replica may sign only its own id's records: the payload's id must be the key."""
    value = signed_value(KEY, TOPIC, b"r2", announcement(replica_id="r1").to_bytes())
    with pytest.raises(AnnouncementError, match="under key"):
        decode(value, record_key=b"r2")


def test_the_read_token_cannot_sign() -> None:
    """Readers hold public keys only: what they hold verifies but cannot make a signature."""
    keys = KEY.verifier()
    assert b"PRIVATE" not in keys.to_pem()
    assert MembershipKeys.from_pem(keys.to_pem()).keys == keys.keys


def test_rotation_readers_trust_old_and_new_keys(tmp_path: Any) -> None:
    both = tmp_path / "keys.pem"
    both.write_bytes(KEY.public_pem() + OTHER_KEY.public_pem())
    keys = MembershipKeys.load(str(both), "--membership-keys")
    assert decode(announcement_record(announcement(), KEY), keys) == announcement()
    assert decode(announcement_record(announcement(), OTHER_KEY), keys) == announcement()
    new = tmp_path / "new.pem"
    new.write_bytes(OTHER_KEY.public_pem())
    after = MembershipKeys.load(f"{new}", "--membership-keys")
    with pytest.raises(AnnouncementError, match="not among"):
        decode(announcement_record(announcement(), KEY), after)


def test_a_private_key_file_also_verifies(tmp_path: Any) -> None:
    path = tmp_path / "replica.pem"
    path.write_bytes(KEY.to_pem())
    assert MembershipKeys.load(str(path), "--membership-keys").keys == KEY.verifier().keys
    assert MembershipKey.load(str(path), "--announce-key").key_id == KEY.key_id


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "no PUBLIC KEY"),
        (b"not a key", "no PUBLIC KEY"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "malformed"),
    ],
)
def test_bad_key_files_fail_naming_the_option_and_path(
    tmp_path: Any, content: bytes, message: str
) -> None:
    path = tmp_path / "keys.pem"
    path.write_bytes(content)
    with pytest.raises(DiscoveryError, match=message) as caught:
        MembershipKeys.load(str(path), "--membership-keys")
    assert "--membership-keys" in str(caught.value) and str(path) in str(caught.value)
    with pytest.raises(DiscoveryError, match="cannot read"):
        MembershipKeys.load(str(tmp_path / "missing.pem"), "--membership-keys")
    with pytest.raises(DiscoveryError, match="--announce-key"):
        MembershipKey.load(str(path), "--announce-key")


def test_the_default_key_is_created_once_owner_only(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "conf" / "key.pem"
    monkeypatch.setenv(DEFAULT_KEY_ENV, str(path))
    assert MembershipKeys.default().keys == {}  # readers never create it
    made: list[str] = []

    def make() -> None:
        made.append(MembershipKey.default().key_id)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 1  # concurrent creators agree on one key (a shared temporary
    # file name once let a later creator rewrite the key another had already linked)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert list(MembershipKeys.default().keys) == made[:1]
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


@given(st.binary(max_size=2048))
def test_any_record_value_is_refused_cleanly(value: bytes) -> None:
    with pytest.raises(AnnouncementError):
        open_signed(KEY.verifier(), TOPIC, b"r1", value)


@given(
    st.dictionaries(
        st.sampled_from(["version", "key_id", "signature", "payload", "x"]),
        st.one_of(st.none(), st.integers(), st.text(max_size=100), st.booleans()),
    )
)
def test_any_envelope_is_refused_cleanly(envelope: dict[str, Any]) -> None:
    with pytest.raises(AnnouncementError):
        open_signed(KEY.verifier(), TOPIC, b"r1", json.dumps(envelope).encode())


# -- who gets the credentials ---------------------------------------------------------------
def test_tls_locations_need_configured_roots() -> None:
    replica = announcement()
    assert dialable_location(replica, tls_roots=True) == replica.location
    with pytest.raises(UnverifiableReplicaError, match="system's roots"):
        dialable_location(replica, tls_roots=False)


@pytest.mark.parametrize(
    "location",
    [
        "grpc+unix://localhost:1/tmp/flight.sock",
        "grpc://10.0.0.1:5001",
        "grpc+tcp://example.org:5001",
    ],
)
def test_unix_and_plain_locations_beyond_loopback_are_never_dialed(location: str) -> None:
    with pytest.raises(UnverifiableReplicaError):
        dialable_location(announcement(location=location), tls_roots=True)


def test_a_plain_loopback_location_is_dialed_only_on_the_same_loopback() -> None:
    here = loopback_identity()
    assert here is not None  # Linux: boot id and network namespace
    local = announcement(location="grpc://127.0.0.1:5001", loopback=here)
    assert dialable_location(local, tls_roots=False) == "grpc://127.0.0.1:5001"
    for elsewhere in (None, "another-boot/net:1"):
        with pytest.raises(UnverifiableReplicaError, match="another host"):
            dialable_location(
                announcement(location="grpc://127.0.0.1:5001", loopback=elsewhere),
                tls_roots=True,
            )


def test_an_announcement_made_from_a_store_names_this_loopback(make_store: Any) -> None:
    store = make_store(topic=CHANGELOG, partitions=2)
    made = ReplicaAnnouncement.of_store(store, location="grpc://127.0.0.1:1", ttl_ms=1000)
    assert made.loopback == loopback_identity()


# -- the CLI --------------------------------------------------------------------------------
def test_membership_key_new_writes_an_owner_only_key_once(
    tmp_path: Any, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    from spark_statestore.cli import main

    path = tmp_path / "replicas.pem"
    assert main(["membership-key", "new", str(path)]) == 0
    public = capsysbinary.readouterr().out
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = MembershipKey.load(str(path), "x")
    assert MembershipKeys.from_pem(public).keys == key.verifier().keys
    assert main(["membership-key", "new", str(path)]) == 2  # never overwritten
    assert MembershipKey.load(str(path), "x").key_id == key.key_id
    assert main(["membership-key", "public", str(path)]) == 0
    assert capsysbinary.readouterr().out == public


def test_membership_keys_flag_fails_naming_the_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_statestore.cli import main

    bad = tmp_path / "nothing.pem"
    bad.write_text("no key here")
    args = ["query", "--changelog", "c", "--bootstrap-servers", "b", "--all"]
    token = tmp_path / "token"
    token.write_text("t" * 32)
    code = main([*args, "--token-file", str(token), "--membership-keys", str(bad)])
    assert code == 2
    assert f"--membership-keys: {bad}" in capsys.readouterr().err


# -- the announcer's waits ------------------------------------------------------------------
class _SlowProducer:
    """A producer whose records are never delivered (a slow cluster): records what it was
    asked to wait."""

    def __init__(self) -> None:
        self.produced: list[bytes | None] = []
        self.waits: list[float] = []

    def produce(self, topic: str, *, key: bytes, value: bytes | None, on_delivery: Any) -> None:
        self.produced.append(value)

    def flush(self, timeout: float) -> int:
        self.waits.append(timeout)
        return len(self.produced)  # still queued


def test_an_announcer_waits_at_most_a_ttl_and_a_slow_first_delivery_is_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 6: the first announcement and the tombstone could each block 30 s, twice the
    default TTL, after which neither matters any more."""
    from spark_statestore.connectors.kafka import clients
    from spark_statestore.connectors.kafka.discovery import announcer as module

    producer = _SlowProducer()
    monkeypatch.setattr(module, "ensure_replicas_topic", lambda *args: TOPIC)
    monkeypatch.setattr(clients, "producer", lambda *args, **kwargs: producer)
    announcer = module.ReplicaAnnouncer(
        "unused:9092",
        announcement(ttl_ms=2_000),
        lambda: (announcement().position, {}),
        interval_s=3600,
        timeout_s=30,
        key=KEY,
    )
    announcer.start()  # not delivered within its TTL: a warning, the heartbeats go on
    assert announcer._thread is not None
    announcer.close()
    assert producer.waits == [2.0, 2.0]  # the first announcement; the withdrawal
    first, withdrawal, tombstone = producer.produced
    assert tombstone is None and first is not None and withdrawal is not None
    assert verified_announcement(
        withdrawal, keys=KEY.verifier(), topic=TOPIC, record_key=b"r1"
    ).withdrawn


def test_a_reader_says_why_when_every_verified_announcement_expired() -> None:
    """Finding 2's other half: a reader whose clock runs ahead of the broker's by more than
    the TTL sees no replica; it fails closed, and says so."""
    from spark_statestore.connectors.kafka.discovery import ReplicaRegistry

    registry = ReplicaRegistry.__new__(ReplicaRegistry)
    registry.changelog, registry.ttl_ms, registry.refusals = CHANGELOG, None, []
    registry._partitions, registry._as_of_ms = 4, None
    registry._clock = lambda: 1_000_000 + 3600.0  # an hour ahead of when it was appended
    seen = announcement(heartbeat_ms=1_000_000_000, seen_ms=1_000_000_000, ttl_ms=15_000)
    registry._latest = {b"r1": seen}
    view = registry.view()
    assert view.replicas == ()
    assert "clock runs ahead" in view.refused[-1]


def test_an_announced_ttl_covers_a_heartbeat_delayed_by_a_busy_host() -> None:
    """Issue 38: three 200 ms intervals (0.6 s) expired a live owner whose heartbeat a busy
    2-core machine delayed; the TTL keeps three intervals and at least 2 s of slack."""
    from spark_statestore.discovery import announce_ttl_ms

    assert announce_ttl_ms(200) == 2_200
    assert announce_ttl_ms(5_000) == 15_000
    assert all(announce_ttl_ms(i) >= 3 * i and announce_ttl_ms(i) >= i + 2_000 for i in (1, 999))
