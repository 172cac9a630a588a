"""The record value of ``<changelog>-replicas``: an announcement signed by a membership key.

``{"version": 2, "key_id", "signature", "payload"}`` as compact JSON, the last two in
base64; the payload is the announcement's own JSON
(:meth:`~spark_statestore.discovery.ReplicaAnnouncement.to_bytes`). The Ed25519 signature
covers a domain tag, the topic and the record key (each with its length) and the payload,
so a signed announcement cannot be replayed under another replica id or on another
changelog's topic. :func:`announcement_record` makes one; :func:`verified_announcement`
believes one only once its signature verifies under the reader's keys and it names the
record's replica id and changelog.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from typing import TYPE_CHECKING, Final

from spark_statestore.discovery.announcement import (
    MAX_ANNOUNCEMENT_BYTES,
    REPLICAS_SUFFIX,
    ReplicaAnnouncement,
)
from spark_statestore.discovery.errors import AnnouncementError

if TYPE_CHECKING:
    from spark_statestore.discovery.signing import MembershipKey, MembershipKeys

__all__ = [
    "SIGNED_FORMAT_VERSION",
    "announcement_record",
    "open_signed",
    "signed_value",
    "verified_announcement",
]

SIGNED_FORMAT_VERSION: Final = 2
"""The record value's format: a signed envelope around the announcement's JSON."""

_DOMAIN = b"spark-statestore replica announcement v2\x00"
_SIGNATURE_BYTES = 64
_KEY_ID_TEXT = re.compile(r"[0-9a-f]{16}")


def _message(topic: str, record_key: bytes, payload: bytes) -> bytes:
    """What is signed: the domain, then the topic and the record key with their lengths (so
    no two (topic, key, payload) triples give the same bytes), then the payload."""
    encoded_topic = topic.encode("utf-8")
    return b"".join(
        (
            _DOMAIN,
            struct.pack(">I", len(encoded_topic)),
            encoded_topic,
            struct.pack(">I", len(record_key)),
            record_key,
            payload,
        )
    )


def signed_value(key: MembershipKey, topic: str, record_key: bytes, payload: bytes) -> bytes:
    """The record value carrying ``payload`` (an announcement's JSON) signed by ``key`` for
    ``record_key`` on ``topic``: compact JSON ``{"version", "key_id", "signature",
    "payload"}``, the last two in base64."""
    signature = key.sign(_message(topic, record_key, payload))
    envelope = {
        "version": SIGNED_FORMAT_VERSION,
        "key_id": key.key_id,
        "signature": base64.b64encode(signature).decode("ascii"),
        "payload": base64.b64encode(payload).decode("ascii"),
    }
    return json.dumps(envelope, separators=(",", ":")).encode("ascii")


def open_signed(keys: MembershipKeys, topic: str, record_key: bytes, value: bytes) -> bytes:
    """The payload of a record value :func:`signed_value` made, once its signature is
    checked against ``keys`` for ``record_key`` on ``topic``.

    Raises
    ------
    AnnouncementError
        If the value is not a signed envelope (an unsigned announcement of an older version
        included), names a key not in ``keys``, or its signature does not verify (forged,
        altered, or replayed under another key or topic).
    """
    try:
        envelope = json.loads(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AnnouncementError(f"replica record is not valid JSON: {exc}") from None
    if not isinstance(envelope, dict):
        raise AnnouncementError("replica record is not a JSON object")
    version = envelope.get("version")
    if version != SIGNED_FORMAT_VERSION or "signature" not in envelope:
        raise AnnouncementError(
            f"replica record is not signed (format version {version!r:.20}; signed records are "
            f"version {SIGNED_FORMAT_VERSION}): an announcer without a membership key, an "
            "older spark-statestore, or a forgery"
        )
    key_id, signature, payload = (
        envelope.get("key_id"),
        envelope.get("signature"),
        envelope.get("payload"),
    )
    if not isinstance(key_id, str) or not _KEY_ID_TEXT.fullmatch(key_id):
        raise AnnouncementError(f"replica record: key_id must be 16 hex digits, got {key_id!r:.40}")
    if not isinstance(signature, str) or not isinstance(payload, str):
        raise AnnouncementError("replica record: signature and payload must be base64 text")
    try:
        raw_signature = base64.b64decode(signature.encode("ascii"), validate=True)
        raw_payload = base64.b64decode(payload.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise AnnouncementError(
            f"replica record: signature or payload is not base64: {exc}"
        ) from None
    if len(raw_signature) != _SIGNATURE_BYTES:
        raise AnnouncementError("replica record: the signature is not 64 bytes")
    if key_id not in keys.keys:
        raise AnnouncementError(
            f"replica record is signed with key {key_id}, which is not among {keys.source} "
            f"({', '.join(keys.keys) or 'none'}): a replica with another key, or a forgery"
        )
    if not keys.verify(key_id, _message(topic, record_key, raw_payload), raw_signature):
        raise AnnouncementError(
            f"replica record's signature under key {key_id} does not verify: it was altered, "
            "forged, or copied from another replica id or topic"
        )
    return raw_payload


def announcement_record(announcement: ReplicaAnnouncement, key: MembershipKey) -> bytes:
    """The record value of ``announcement`` on ``<changelog>-replicas``, signed by ``key``
    for its replica id."""
    topic = announcement.changelog + REPLICAS_SUFFIX
    record_key = announcement.replica_id.encode("utf-8")
    return signed_value(key, topic, record_key, announcement.to_bytes())


def verified_announcement(
    value: bytes, *, keys: MembershipKeys, topic: str, record_key: bytes
) -> ReplicaAnnouncement:
    """The announcement in a record value of ``topic`` keyed ``record_key``, once its
    signature verifies under ``keys`` and it names that replica id and changelog.

    Raises
    ------
    AnnouncementError
        Unsigned, signed by an unknown key, a signature that does not verify, a malformed
        announcement, or one of another replica id or changelog.
    """
    if len(value) > MAX_ANNOUNCEMENT_BYTES:
        raise AnnouncementError(
            f"replica record is {len(value)} bytes, over the {MAX_ANNOUNCEMENT_BYTES}-byte limit"
        )
    announcement = ReplicaAnnouncement.from_bytes(open_signed(keys, topic, record_key, value))
    if announcement.replica_id.encode("utf-8") != record_key:
        raise AnnouncementError(
            f"the signed announcement of replica {announcement.replica_id!r:.80} is under key "
            f"{record_key!r:.80}"
        )
    if announcement.changelog + REPLICAS_SUFFIX != topic:
        raise AnnouncementError(
            f"the signed announcement of changelog {announcement.changelog!r:.80} is on topic "
            f"{topic!r:.80}"
        )
    return announcement
