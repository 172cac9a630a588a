"""worker_gc: what a Spark Python worker holds for its lifetime leaves the collector's walks.

Each check runs in a child process: a freeze lasts as long as the process that made it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str, *, main: str | None = "pyspark.daemon") -> None:
    """Run ``body`` in a child whose main module says ``main`` (as ``python -m main`` would;
    None: a plain ``python -c``)."""
    script = textwrap.dedent(
        f"""
        import gc, sys, types
        if {main!r} is not None:
            sys.modules["__main__"].__spec__ = types.SimpleNamespace(name={main!r})
        from spark_statestore.connectors.spark.worker_gc import claim_process, freeze_long_lived
        """
    ) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_call_freezes_what_is_alive_and_collects_garbage_first() -> None:
    _run(
        """
        import weakref

        class Node:
            pass

        garbage = Node()
        garbage.self = garbage  # a cycle: only the collector frees it
        ref = weakref.ref(garbage)
        del garbage
        assert gc.get_freeze_count() == 0
        freeze_long_lived()
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # the modules' objects
        assert ref() is None  # collected before the freeze, not kept forever
        """
    )


def test_later_calls_freeze_again_only_after_an_import() -> None:
    _run(
        """
        freeze_long_lived()
        first = gc.get_freeze_count()
        made_since = [[i] for i in range(100)]  # tracked containers made after the freeze
        freeze_long_lived()
        assert gc.get_freeze_count() == first  # nothing imported: no second freeze
        sys.modules["lazily_imported"] = types.ModuleType("lazily_imported")
        freeze_long_lived()
        assert gc.get_freeze_count() >= first + len(made_since)
        again = gc.get_freeze_count()
        freeze_long_lived()
        assert gc.get_freeze_count() == again
        """
    )


def test_a_forked_child_freezes_its_own_objects() -> None:
    _run(
        """
        import os
        freeze_long_lived()
        pid = os.fork()
        if pid == 0:
            before = gc.get_freeze_count()
            made_in_child = [[i] for i in range(100)]
            freeze_long_lived()  # same modules, another process: it freezes
            os._exit(0 if gc.get_freeze_count() >= before + len(made_in_child) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        """
    )


def test_a_process_that_is_not_a_spark_worker_is_left_alone() -> None:
    for main in (None, "pytest", "my_app.main"):
        _run(
            """
            freeze_long_lived()
            assert gc.get_freeze_count() == 0
            """,
            main=main,
        )


def test_a_claimed_process_of_ours_freezes() -> None:
    _run(
        """
        claim_process()
        freeze_long_lived()
        assert gc.get_freeze_count() > 1000
        """,
        main="spark_statestore.connectors.spark.host.__main__",
    )
