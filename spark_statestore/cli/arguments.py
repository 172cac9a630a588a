"""The argparse types of the command's flags, shared by every subcommand's parser."""

from __future__ import annotations

import argparse
import re

from spark_statestore.integer_spec import ascii_integer

__all__ = ["integer", "seconds"]


def integer(text: str) -> int:
    """The argparse type of integer flags: ASCII digits and an optional ``-`` (``int()``, argparse's
    usual type, also takes other scripts' digits, ``+``, ``_`` and blanks)."""
    number = ascii_integer(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer written in ASCII digits 0-9")
    return number


_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def seconds(text: str) -> float:
    """The argparse type of duration flags: a plain decimal number of seconds in ASCII
    (``float()`` also takes ``nan``, ``inf``, ``1e9``, other scripts' digits and blanks)."""
    if _SECONDS.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a number of seconds (ASCII digits, e.g. 30 or 2.5)"
        )
    return float(text)
