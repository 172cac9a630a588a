"""The argparse types of the command's flags, shared by every subcommand's parser."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence

from spark_statestore.errors import OptionError
from spark_statestore.integer_spec import ascii_integer

__all__ = ["integer", "parse_settings", "port", "seconds"]


def integer(text: str) -> int:
    """The argparse type of integer flags: ASCII digits and an optional ``-`` (``int()``, argparse's
    usual type, also takes other scripts' digits, ``+``, ``_`` and blanks)."""
    number = ascii_integer(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer written in ASCII digits 0-9")
    return number


def port(text: str) -> int:
    """The argparse type of port flags: an integer 0-65535 (0: a free port)."""
    number = integer(text)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
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


def parse_settings(
    pairs: Sequence[str],
    *,
    option: str,
    what: str,
    example: str,
    reserved: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Parse a repeatable ``KEY=VALUE`` flag's items (a client's settings); a later repeat
    of a key wins.

    Raises
    ------
    OptionError
        For an item without ``=`` or with an empty key, or a key in ``reserved`` (which
        maps it to the flag that sets it); the message names ``option``, ``what`` the
        settings are, and ``example``.
    """
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise OptionError(
                f"option {option}: expected KEY=VALUE ({what}, e.g. {option} {example}), "
                f"got {pair!r}"
            )
        if reserved and key in reserved:
            raise OptionError(f"option {option}: set {key} with {reserved[key]}, not {option}")
        settings[key] = value
    return settings
