"""``spark-statestore inspect``: what a store is and what its last commit recorded.

Shows the manifest (name, role, changelog, partitions, subset, kind, format version), the
latest commit (sequence, position, changelog offsets, commit record) and the owner (live, or
the stale file of a dead one), read through the live owner's server when there is one, else
from the store on disk (:mod:`~spark_statestore.cli.store_state`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from spark_statestore.cli.store_state import StoreState, StoreTarget, read_state
from spark_statestore.serve.protocol import lags_to_dict

if TYPE_CHECKING:
    from spark_statestore.store.ownership import OwnerInfo

__all__ = ["inspect_json", "inspect_lines", "owner_text", "run_inspect"]


def run_inspect(target: StoreTarget, *, as_json: bool) -> int:
    """Print the store's description (text, or one JSON object); returns the exit code."""
    state = read_state(target, purpose="spark-statestore inspect")
    if as_json:
        print(json.dumps(inspect_json(state), sort_keys=True), flush=True)
    else:
        print("\n".join(inspect_lines(state)), flush=True)
    return 0


def kind_of(state: StoreState) -> str | None:
    """``key-value``, ``versioned``, or None when an older server did not say."""
    description = state.description
    if description.format_version is None:
        return None
    return "key-value" if description.history_retention_ms is None else "versioned"


def inspect_json(state: StoreState) -> dict[str, Any]:
    """The description's fields (:meth:`StoreDescription.to_dict`) plus ``kind``, ``owner``
    (with ``live``), ``read_through`` (the server's location, null from disk), ``pins`` and
    ``lags``."""
    owner = None if state.owner is None else {**asdict(state.owner), "live": state.owner_live}
    return {
        **state.description.to_dict(),
        "kind": kind_of(state),
        "owner": owner,
        "read_through": state.location,
        "pins": state.pins,
        "lags": None if state.lags is None else lags_to_dict(state.lags),
    }


def inspect_lines(state: StoreState) -> list[str]:
    """The human-readable description, one ``label  value`` line per item."""
    d = state.description
    subset = []
    if d.held_partitions is not None:
        subset.append(f"holds partitions {', '.join(map(str, d.held_partitions))}")
    if d.key_prefix is not None:
        subset.append(f"keys starting with 0x{d.key_prefix.hex()}")
    changelog = d.changelog_topic or "none (a leader publishing no changelog)"
    rows = [
        ("store", f"{d.store} (id {d.store_id})"),
        ("path", d.path),
        ("kind", _kind_text(state)),
        ("role", d.role.value),
        ("changelog", f"{changelog}, {d.partitions} partition(s)"),
        ("subset", "; ".join(subset) if subset else "no (every partition and key)"),
        ("created", d.created_at),
        ("commit", str(d.commit_seq)),
        ("position", d.position.to_json()),
        ("offsets", _offsets_text(d.changelog_offsets)),
        ("commit record", _record_text(d.commit_record)),
        ("owner", _owner_text(state)),
        ("read through", _source_text(state)),
    ]
    if state.lags is not None:
        lags = " ".join(f"{p}:{info.offset_lag}" for p, info in sorted(state.lags.items()))
        rows.append(("lag", lags or "-"))
    width = max(len(label) for label, _ in rows)
    return [f"{label.ljust(width)}  {value}" for label, value in rows]


def _kind_text(state: StoreState) -> str:
    d = state.description
    kind = kind_of(state)
    if kind is None:
        return "unknown (the owner's server is of an older version)"
    if kind == "versioned":
        return (
            f"versioned, history retention {d.history_retention_ms} ms "
            f"(format version {d.format_version})"
        )
    return f"key-value (format version {d.format_version})"


def _offsets_text(offsets: Mapping[int, int]) -> str:
    if not offsets:
        return "none"
    return " ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) + "  (partition:next offset)"


def _record_text(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "none"
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _owner_text(state: StoreState) -> str:
    return owner_text(state.owner, state.owner_live)


def owner_text(owner: OwnerInfo | None, live: bool) -> str:
    """A store's owner in one line: live, or the stale file a dead one left, or none."""
    if owner is None:
        return "none (no process has the store open)"
    if live:
        return f"live: {owner.describe()}"
    return f"stale: {owner.describe()} (no longer running; the next owner replaces its file)"


def _source_text(state: StoreState) -> str:
    if state.location is None:
        return "the store on disk (no live owner serves it)"
    return f"the owner's server at {state.location} ({state.pins} pinned snapshot(s))"
