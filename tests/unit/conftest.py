"""Fixtures of the store engine's unit tests: a factory of LevelDB stores on ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_statestore.store import Role, Store, StoreOptions, StoreSpec


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Factory: ``make_store(name="store", role=Role.LEADER, topic="changelog",
    partitions=1, store_name=None, options=None)`` opens (creating) a writer store under
    ``tmp_path``; every store it opened is closed when the test ends."""
    opened: list[Store] = []

    def factory(
        name: str = "store",
        *,
        role: Role = Role.LEADER,
        topic: str | None = "changelog",
        partitions: int = 1,
        store_name: str | None = None,
        options: StoreOptions | None = None,
    ) -> Store:
        spec = StoreSpec(role, topic, partitions, store_name)
        store = Store.open(tmp_path / name, spec, purpose="unit test", options=options)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()
