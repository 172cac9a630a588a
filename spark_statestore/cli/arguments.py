"""The argparse types of the command's flags, shared by every subcommand's parser."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_statestore import native
from spark_statestore.errors import OptionError
from spark_statestore.integer_spec import ascii_integer
from spark_statestore.version import __version__

if TYPE_CHECKING:
    from spark_statestore.metrics.server import MetricsEndpoint

__all__ = [
    "VersionAction",
    "add_metrics_arguments",
    "integer",
    "metrics_endpoint",
    "parse_settings",
    "port",
    "seconds",
]


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


def add_metrics_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The ``--metrics-*`` flags of a long-running command: an opt-in endpoint serving
    ``what``'s metrics at ``/metrics`` and its health at ``/health``."""
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help=f"serve {what}'s metrics in Prometheus' text format at http://HOST:PORT/metrics "
        "and its health at /health (0: a free port, printed)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the metrics endpoint's address (default 127.0.0.1; beyond loopback it needs "
        "--metrics-tls-cert, --metrics-tls-key and --metrics-token-file)",
    )
    parser.add_argument(
        "--metrics-tls-cert", metavar="F", help="PEM certificate chain of the endpoint (HTTPS)"
    )
    parser.add_argument("--metrics-tls-key", metavar="F", help="PEM private key of the endpoint")
    parser.add_argument(
        "--metrics-token-file",
        metavar="F",
        help="a file holding the bearer token every scrape must send "
        "(Prometheus: authorization: {credentials_file: F})",
    )


def metrics_endpoint(args: argparse.Namespace) -> MetricsEndpoint | None:
    """The endpoint :func:`add_metrics_arguments`' flags ask for (None without
    ``--metrics-port``).

    Raises
    ------
    OptionError
        Another ``--metrics-*`` flag without ``--metrics-port``.
    """
    from spark_statestore.metrics.server import MetricsEndpoint

    others = {
        "--metrics-tls-cert": args.metrics_tls_cert,
        "--metrics-tls-key": args.metrics_tls_key,
        "--metrics-token-file": args.metrics_token_file,
    }
    if args.metrics_port is None:
        given = [flag for flag, value in others.items() if value is not None]
        if given:
            raise OptionError(
                f"{', '.join(given)}: only with --metrics-port (the endpoint they configure)"
            )
        return None
    return MetricsEndpoint(
        args.metrics_port,
        args.metrics_host,
        args.metrics_tls_cert,
        args.metrics_tls_key,
        args.metrics_token_file,
    )


class VersionAction(argparse.Action):
    """``--version``: the release (package and extension share it) and the paths that run."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help=str(kwargs.get("help", "")))

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"{parser.prog} {__version__}\n{native.status()}", flush=True)
        parser.exit()
