"""Keys as the command line writes them (``--key``, ``--range``, ``--prefix``), as stored bytes."""

from __future__ import annotations

import re
import struct

from spark_statestore.errors import OptionError
from spark_statestore.integer_spec import ascii_integer

__all__ = ["key_bytes"]

_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def key_bytes(text: str, key_format: str, flag: str) -> bytes:
    """The stored bytes of a key written in ``key_format`` on the command line.

    Raises
    ------
    OptionError
        Naming ``flag``, when ``text`` is not a value of that format.
    """
    if key_format == "string":
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise OptionError(f"option {flag}: {text!r} is not valid UTF-8 ({exc})") from None
    if key_format == "binary":
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise OptionError(
                f"option {flag}: {text[:40]!r} is not hex (binary keys are written in hex, "
                "e.g. 0a1b)"
            ) from None
    if key_format == "double":
        if _DECIMAL.fullmatch(text) is None:
            raise OptionError(f"option {flag}: {text[:40]!r} is not a decimal number")
        return struct.pack(">d", float(text))
    number = ascii_integer(text)
    width = 8 if key_format == "long" else 4
    if number is None or not -(1 << (width * 8 - 1)) <= number < 1 << (width * 8 - 1):
        raise OptionError(
            f"option {flag}: {text[:40]!r} is not a key of --key-format {key_format} (an "
            f"integer in ASCII digits, {width * 8}-bit signed)"
        )
    return number.to_bytes(width, "big", signed=True)
