"""What a bare host lacks: the build tools and native libraries a cluster's executors do not have.

A host made by :class:`~spark_statestore.connectors.local.hosts.Host` sees this machine's files;
a cluster's worker does not have our compilers, Rust, the ``-dev`` headers or the system's
LevelDB and snappy. :func:`builder_paths` lists those that exist here, so that a host can cover
them (directories with an empty tmpfs, files with ``/dev/null``) and a test can show that what
runs there came shipped with the application (the compiled extension's wheel brings its own
LevelDB, snappy and OpenSSL).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

__all__ = ["builder_paths"]

_TOOLS = (
    "cargo", "rustc", "rustup", "rustdoc", "maturin",
    "cc", "c++", "gcc", "g++", "clang", "clang++", "cpp", "ld", "ld.bfd", "ld.gold",
)  # fmt: skip
_DIRECTORIES = (
    "~/.cargo",
    "~/.rustup",
    "/usr/include/leveldb",
    "/usr/include/openssl",
    "/usr/include/x86_64-linux-gnu/openssl",
    "/usr/include/librdkafka",
    "/usr/lib/gcc",
)
_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/libleveldb.so*",
    "/usr/lib/x86_64-linux-gnu/libsnappy.so*",
    "/usr/lib/x86_64-linux-gnu/librdkafka*.so*",
)


def builder_paths() -> tuple[list[Path], list[Path]]:
    """The directories and the files of this machine that a bare host must not have: Rust's
    and the C compilers' programs (and GCC's internals), LevelDB's, OpenSSL's and librdkafka's
    headers, and the system's LevelDB, snappy and librdkafka libraries. Only those that exist;
    files resolved (a symlink's target is what must be covered)."""
    directories = sorted(
        {
            Path(os.path.expanduser(d)).resolve()
            for d in _DIRECTORIES
            if Path(os.path.expanduser(d)).is_dir()
        }
    )
    files: set[Path] = set()
    for tool in _TOOLS:
        found = shutil.which(tool)
        if found is not None:
            files.add(Path(found).resolve())
    for pattern in _LIBRARIES:
        files.update(Path(p).resolve() for p in glob.glob(pattern))
    outside = [
        f for f in files if f.is_file() and not any(d == f or d in f.parents for d in directories)
    ]
    return directories, sorted(outside)
