"""The switch between the compiled extension and the reference paths
(:mod:`spark_statestore.native`): which runs, why, said once; an extension of another version
is never used."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator

import pytest

from spark_statestore import native
from spark_statestore.errors import OptionError
from spark_statestore.version import __version__


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has not looked at the extension yet."""
    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setattr(native, "_announced", set())
    yield


def fake_extension(monkeypatch: pytest.MonkeyPatch, version: str | None) -> types.ModuleType:
    extension = types.ModuleType("spark_statestore_native")
    extension.__file__ = "/somewhere/spark_statestore_native.so"
    if version is not None:
        extension.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spark_statestore_native", extension)
    return extension


def test_same_version_runs_the_fast_paths_and_says_so_once(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    extension = fake_extension(monkeypatch, __version__)
    monkeypatch.delenv(native.ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is extension
        assert native.module() is extension
    lines = [r.getMessage() for r in caplog.records if r.name == native.__name__]
    assert lines == [
        f"the compiled fast paths run: spark_statestore_native {__version__} "
        "(/somewhere/spark_statestore_native.so)"
    ]
    assert native.status().startswith("compiled fast paths: spark_statestore_native ")


@pytest.mark.parametrize("version", ["0.0.1", None])
def test_another_version_is_never_used(
    fresh: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    version: str | None,
) -> None:
    fake_extension(monkeypatch, version)
    monkeypatch.setenv(native.ENV, "auto")
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
        assert native.module() is None
    warnings = [r for r in caplog.records if r.name == native.__name__]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert f"is version {version or 'unknown'}" in message
    assert f"not this package's {__version__}" in message
    monkeypatch.setenv(native.ENV, "1")
    with pytest.raises(OptionError, match="requires the compiled extension, but the installed"):
        native.module()


def test_a_missing_extension_falls_back_with_the_reason(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "spark_statestore_native", None)  # import fails
    monkeypatch.delenv(native.ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
    (record,) = [r for r in caplog.records if r.name == native.__name__]
    assert record.levelno == logging.WARNING
    assert "reference paths run (slower)" in record.getMessage()
    assert "it does not import" in record.getMessage()
    assert native.status().startswith("pure-Python reference paths: the compiled extension")


def test_off_is_info_not_a_warning(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(native.ENV, "0")
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
    (record,) = [r for r in caplog.records if r.name == native.__name__]
    assert record.levelno == logging.INFO
    assert record.getMessage() == f"the pure-Python reference paths run: {native.ENV}=0"
    assert native.status() == f"pure-Python reference paths: {native.ENV}=0"


def test_the_installed_extension_is_of_this_version() -> None:
    extension = pytest.importorskip("spark_statestore_native")
    assert extension.__version__ == __version__


def test_version_says_which_paths_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_statestore.cli import main

    monkeypatch.setenv(native.ENV, "0")
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.splitlines() == [
        f"spark-statestore {__version__}",
        f"pure-Python reference paths: {native.ENV}=0",
    ]
