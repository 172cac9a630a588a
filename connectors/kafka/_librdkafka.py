"""Locate and bind the librdkafka shared library bundled in the confluent-kafka wheel.

The wheel vendors librdkafka (auditwheel puts it in ``confluent_kafka.libs/`` next to the
package, with a hashed file name). We bind the same file the Python client already loaded,
so the mock cluster and the clients share one librdkafka. ``SPARK_STATESTORE_LIBRDKAFKA``
overrides the search with an explicit path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import os
from pathlib import Path

from spark_statestore.connectors.kafka.errors import LibrdkafkaNotFoundError

__all__ = ["find_librdkafka", "librdkafka"]

ENV_OVERRIDE = "SPARK_STATESTORE_LIBRDKAFKA"

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_int16 = ctypes.c_int16
c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t

# name -> (restype, argtypes). Only what the embedded broker uses.
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "rd_kafka_version_str": (c_char_p, []),
    "rd_kafka_conf_new": (c_void_p, []),
    "rd_kafka_conf_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "rd_kafka_conf_destroy": (None, [c_void_p]),
    "rd_kafka_new": (c_void_p, [c_int, c_void_p, c_char_p, c_size_t]),
    "rd_kafka_destroy": (None, [c_void_p]),
    "rd_kafka_err2name": (c_char_p, [c_int]),
    "rd_kafka_err2str": (c_char_p, [c_int]),
    "rd_kafka_mock_cluster_new": (c_void_p, [c_void_p, c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [c_void_p]),
    "rd_kafka_mock_cluster_bootstraps": (c_char_p, [c_void_p]),
    "rd_kafka_mock_topic_create": (c_int, [c_void_p, c_char_p, c_int, c_int]),
    "rd_kafka_mock_topic_set_error": (None, [c_void_p, c_char_p, c_int]),
    "rd_kafka_mock_partition_set_leader": (c_int, [c_void_p, c_char_p, c_int32, c_int32]),
    "rd_kafka_mock_broker_set_down": (c_int, [c_void_p, c_int32]),
    "rd_kafka_mock_broker_set_up": (c_int, [c_void_p, c_int32]),
    "rd_kafka_mock_broker_set_rtt": (c_int, [c_void_p, c_int32, c_int]),
    "rd_kafka_mock_broker_set_host_port": (None, [c_void_p, c_int32, c_char_p, c_int]),
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [c_void_p, c_int16, c_size_t, ctypes.POINTER(c_int)],
    ),
    "rd_kafka_mock_clear_request_errors": (None, [c_void_p, c_int16]),
    "rd_kafka_mock_set_apiversion": (c_int, [c_void_p, c_int16, c_int16, c_int16]),
}


def _candidates() -> list[Path]:
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        return [Path(override)]
    found: list[Path] = []
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is not None and spec.origin:
        package_dir = Path(spec.origin).resolve().parent
        for libs in (package_dir.parent / "confluent_kafka.libs", package_dir / ".libs"):
            found.extend(Path(p) for p in sorted(glob.glob(str(libs / "librdkafka*.so*"))))
            found.extend(Path(p) for p in sorted(glob.glob(str(libs / "librdkafka*.dylib"))))
    system = ctypes.util.find_library("rdkafka")
    if system:
        found.append(Path(system))
    return found


def find_librdkafka() -> Path:
    """Return the path of the librdkafka library that carries the mock-cluster API.

    Raises
    ------
    LibrdkafkaNotFoundError
        When no candidate exists or none exports ``rd_kafka_mock_cluster_new``.
    """
    candidates = _candidates()
    problems: list[str] = []
    for path in candidates:
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            problems.append(f"{path}: {exc}")
            continue
        missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
        if missing:
            problems.append(f"{path}: missing symbols {', '.join(missing)}")
            continue
        return path
    where = "; ".join(problems) if problems else "no candidate file found"
    raise LibrdkafkaNotFoundError(
        "cannot load librdkafka with the mock cluster API needed by the embedded broker "
        f"({where}). Install confluent-kafka >= 2.6 from a binary wheel "
        f"(pip install 'confluent-kafka>=2.6'), or point {ENV_OVERRIDE} at a librdkafka "
        "shared library built with the mock cluster."
    )


@functools.cache
def librdkafka() -> ctypes.CDLL:
    """The bound library with argument and return types declared."""
    lib = ctypes.CDLL(str(find_librdkafka()))
    for name, (restype, argtypes) in _PROTOTYPES.items():
        func = getattr(lib, name)
        func.restype = restype
        func.argtypes = argtypes
    return lib


def err_name(code: int) -> str:
    """librdkafka's symbolic name of an error code (e.g. ``NOT_LEADER_OR_FOLLOWER``)."""
    raw = librdkafka().rd_kafka_err2name(code)
    return raw.decode() if raw else str(code)
