"""``spark-statestore membership-key``: make a membership key, print its public half.

Replicas sign their announcements with a membership key (the source's and the sink's
``announceKeyFile``, ``serve --announce-key``); readers verify them with its public key
(``query``/``lag --membership-keys``, ``enrich(membership_keys_file=)``). See
:mod:`spark_statestore.discovery.signing`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_membership_commands"]


def _cmd_new(args: argparse.Namespace) -> int:
    from spark_statestore.discovery.signing import MembershipKey
    from spark_statestore.errors import OptionError

    key = MembershipKey.generate()
    try:
        fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise OptionError(
            f"membership-key new: {args.file} exists; a key is never overwritten (rotate by "
            "making a new file: see docs/discovery.md, Trust)"
        ) from None
    except OSError as exc:
        raise OptionError(
            f"membership-key new: cannot create {args.file}: {exc.strerror}"
        ) from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.to_pem())
        handle.flush()
        os.fsync(handle.fileno())
    print(f"membership key {key.key_id} written to {args.file} (owner-only)", file=sys.stderr)
    sys.stdout.buffer.write(key.public_pem())
    return 0


def _cmd_public(args: argparse.Namespace) -> int:
    from spark_statestore.discovery.signing import MembershipKey, default_key_path

    if args.file is None:
        key = MembershipKey.default()
        print(f"the default membership key {default_key_path()}", file=sys.stderr)
    else:
        key = MembershipKey.load(args.file, "FILE")
    print(f"key id {key.key_id}", file=sys.stderr)
    sys.stdout.buffer.write(key.public_pem())
    return 0


def add_membership_commands(sub: Any) -> None:
    """``membership-key new FILE`` and ``membership-key public [FILE]``."""
    command = sub.add_parser(
        "membership-key",
        help="make a membership key (replicas sign their announcements with it) or print "
        "its public key (readers verify with it)",
        description="Replicas announce themselves on <changelog>-replicas signed with a "
        "membership key (Ed25519); routers, the CLI and enrich believe only announcements "
        "signed by a key whose public half they were given. Without configuration every "
        "process of a user shares a default key, created owner-only on first use.",
    )
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new",
        help="write a new private key to FILE (owner-only) and print its public key",
    )
    new.add_argument("file", metavar="FILE", help="where to write the key (must not exist)")
    new.set_defaults(func=_cmd_new)
    public = actions.add_parser(
        "public", help="print the public key of FILE (default: this user's default key)"
    )
    public.add_argument("file", metavar="FILE", nargs="?", help="a membership key file")
    public.set_defaults(func=_cmd_public)
