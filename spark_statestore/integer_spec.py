"""Integers as people write them in options and flags: ASCII digits, an optional ``-``.

The one parser behind every integer option of the Spark data source (``maxOffsetsPerTrigger``,
``servePort``, ``txnVersion``, ...), the partitions of ``startingOffsets`` and the integer flags
of the ``spark-statestore`` command, so all of them accept and refuse the same text. Python's
``int()`` also takes the digits of other scripts (Arabic-Indic U+0663, fullwidth U+FF13),
underscores (``1_000``), a ``+`` and blanks around the number, and ``str.isdigit()`` holds for
superscripts that ``int()`` then refuses: an option that looks like a number to one reader and
like another to the next is refused instead.
"""

from __future__ import annotations

import re

from spark_statestore.errors import OptionError

__all__ = ["INT64_MAX", "ascii_integer", "parse_integer"]

INT64_MAX = 2**63 - 1
"""The largest value of a Java ``long`` (Kafka offsets, Spark batch ids)."""

_INTEGER = re.compile(r"-?[0-9]+")


def ascii_integer(text: str) -> int | None:
    """The integer ``text`` spells in ASCII digits with an optional leading ``-``, else None.

    Examples
    --------
    >>> ascii_integer("-12"), ascii_integer("٣"), ascii_integer("+1"), ascii_integer("1_0")
    (-12, None, None, None)
    """
    if _INTEGER.fullmatch(text) is None:
        return None
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return None


def parse_integer(
    text: str, *, option: str, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Parse an integer option value, within ``[minimum, maximum]`` (None: unbounded).

    Parameters
    ----------
    text
        The value as given (blanks are not stripped here).
    option
        How error messages name the option or flag: ``"'maxOffsetsPerTrigger'"``,
        ``"--brokers"``.
    minimum, maximum
        The inclusive bounds.

    Raises
    ------
    OptionError
        Naming the option, the accepted range and the text; for digits of another script it
        says that only ASCII digits are accepted.
    """
    number = ascii_integer(text)
    bounds = [f">= {minimum}"] if minimum is not None else []
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    wanted = " ".join(["an integer", " and ".join(bounds)]).rstrip()
    shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"
    if number is None:
        hint = "" if text.isascii() else " (ASCII digits 0-9 only)"
        raise OptionError(f"option {option} must be {wanted}, got {shown}{hint}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise OptionError(f"option {option} must be {wanted}, got {shown}")
    return number
