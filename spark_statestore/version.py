"""The release's version: one for the package and its compiled extension.

``native/Cargo.toml`` carries the same number (a unit test holds them equal); the package
refuses an installed extension of another version (:mod:`spark_statestore.native`), since the
two are built and released together.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
