"""Signed membership: who may announce a replica, and how a reader checks that one did.

Anyone with Write on ``<changelog>-replicas`` can put a record there, so a reader believes an
announcement only when it carries a valid signature under a *membership key*: an Ed25519 key
pair whose private half only the replicas hold (it is not the read token: a client that may
query the replicas cannot pose as one) and whose public half every reader holds.

* A replica signs with a :class:`MembershipKey` (a PEM private key file, owner-only).
* A reader verifies with :class:`MembershipKeys`: one or more public keys, each named by its
  key id (the first 8 bytes of the SHA-256 of the raw public key, in hex). Holding several is
  how a key is rotated without downtime: readers trust the old and the new key, replicas
  switch to the new key one by one, then readers drop the old one.
* :mod:`~spark_statestore.discovery.records` signs and verifies the record values.
* Without configuration, the processes of one user on one machine share a default key,
  created owner-only on first use under ``$SPARK_STATESTORE_MEMBERSHIP_KEY`` or
  ``$XDG_CONFIG_HOME/spark-statestore/membership-key.pem`` (``~/.config`` without it):
  replicas and readers of that user agree with nothing to set up. Replicas on several hosts
  need a key of their own, distributed by the operator (``spark-statestore membership-key``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from spark_statestore.discovery.errors import DiscoveryError

__all__ = [
    "DEFAULT_KEY_ENV",
    "MembershipKey",
    "MembershipKeys",
    "default_key_path",
]

DEFAULT_KEY_ENV: Final = "SPARK_STATESTORE_MEMBERSHIP_KEY"
"""Names the default membership key file (else under ``$XDG_CONFIG_HOME``)."""

_KEY_ID_BYTES = 8
_RAW_KEY_BYTES = 32
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", re.S)
_MAX_KEY_FILE_BYTES = 1024 * 1024


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # a dependency: only a broken install lacks it
        raise DiscoveryError(
            "signed replica announcements need the 'cryptography' package: reinstall "
            "spark-statestore with its dependencies"
        ) from exc
    return ed25519


def _key_id(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).digest()[:_KEY_ID_BYTES].hex()


def default_key_path() -> str:
    """Where the default membership key of this user lives (it may not exist yet)."""
    named = os.environ.get(DEFAULT_KEY_ENV)
    if named:
        return named
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "spark-statestore", "membership-key.pem")


def _read_key_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise DiscoveryError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise DiscoveryError(f"{what}: {path} is over {_MAX_KEY_FILE_BYTES} bytes: not a key file")
    return data


@dataclass(frozen=True, slots=True)
class MembershipKey:
    """The private key a replica signs its announcements with.

    Parameters
    ----------
    private_key
        The raw 32-byte Ed25519 private key.
    source
        Where it came from, for messages (a path).
    """

    private_key: bytes
    source: str = "a key"

    def __post_init__(self) -> None:
        if not isinstance(self.private_key, bytes) or len(self.private_key) != _RAW_KEY_BYTES:
            raise DiscoveryError(f"a membership key is 32 raw bytes ({self.source})")

    def __repr__(self) -> str:  # never the key itself
        return f"MembershipKey(key_id={self.key_id!r}, source={self.source!r})"

    @classmethod
    def generate(cls) -> MembershipKey:
        """A new random key."""
        from cryptography.hazmat.primitives import serialization

        key = _crypto().Ed25519PrivateKey.generate()
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls(raw, "a new key")

    @classmethod
    def from_pem(cls, data: bytes, source: str = "a PEM key") -> MembershipKey:
        """The key in a PEM ``PRIVATE KEY`` (PKCS#8, unencrypted) block.

        Raises
        ------
        DiscoveryError
            If ``data`` holds no unencrypted Ed25519 private key.
        """
        from cryptography.hazmat.primitives import serialization

        ed25519 = _crypto()
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise DiscoveryError(
                f"{source} is not an unencrypted PEM private key ({exc}); make one with "
                "'spark-statestore membership-key new FILE'"
            ) from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise DiscoveryError(
                f"{source} holds a {type(key).__name__}, not an Ed25519 private key; make one "
                "with 'spark-statestore membership-key new FILE'"
            )
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls(raw, source)

    @classmethod
    def load(cls, path: str, option: str) -> MembershipKey:
        """The key in the PEM file at ``path``, named by ``option`` in errors.

        Raises
        ------
        DiscoveryError
            Naming ``option`` and ``path``: unreadable, or no Ed25519 private key in it.
        """
        data = _read_key_file(path, f"option {option}")
        return cls.from_pem(data, f"option {option}: {path}")

    @classmethod
    def default(cls, *, create: bool = True) -> MembershipKey:
        """This user's default key (:func:`default_key_path`), created owner-only (0600, in
        a 0700 directory) when missing and ``create``; concurrent creators agree on one.

        Raises
        ------
        DiscoveryError
            If it cannot be read or created.
        """
        path = default_key_path()
        if create and not os.path.exists(path):
            _create_key_file(path)
        return cls.load(path, f"{DEFAULT_KEY_ENV} (the default membership key)")

    # -- use --------------------------------------------------------------------------------
    def _private(self) -> Any:
        return _crypto().Ed25519PrivateKey.from_private_bytes(self.private_key)

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte public key."""
        from cryptography.hazmat.primitives import serialization

        public = self._private().public_key()
        raw: bytes = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return raw

    @property
    def key_id(self) -> str:
        """The key's id: the first 8 bytes of the SHA-256 of its public key, in hex."""
        return _key_id(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return self._private().sign(message)  # type: ignore[no-any-return]

    def to_pem(self) -> bytes:
        """The key as an unencrypted PKCS#8 PEM block (keep it owner-only)."""
        from cryptography.hazmat.primitives import serialization

        return self._private().private_bytes(  # type: ignore[no-any-return]
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def public_pem(self) -> bytes:
        """The public key as a PEM ``PUBLIC KEY`` block (what readers are given)."""
        from cryptography.hazmat.primitives import serialization

        public = self._private().public_key()
        pem: bytes = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem

    def verifier(self) -> MembershipKeys:
        """The keys a reader needs to verify this key's signatures."""
        return MembershipKeys({self.key_id: self.public_key}, self.source)


def _create_key_file(path: str) -> None:
    """Write a new key at ``path`` unless one is there: a fresh file linked into place, so a
    concurrent creator's key wins or ours does, never a mix."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        temporary = f"{path}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as handle:
                fd = -1
                handle.write(MembershipKey.generate().to_pem())
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
        finally:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    except OSError as exc:
        raise DiscoveryError(
            f"cannot create the default membership key {path}: {exc.strerror}; set "
            f"{DEFAULT_KEY_ENV} to a writable path, or give the key file explicitly"
        ) from None


@dataclass(frozen=True, slots=True)
class MembershipKeys:
    """The public keys a reader accepts announcements under, by key id.

    Parameters
    ----------
    keys
        ``{key id: raw 32-byte public key}``; build it with :meth:`from_pem` or :meth:`load`.
    source
        Where they came from, for messages.
    """

    keys: Mapping[str, bytes]
    source: str = "the membership keys"

    def __post_init__(self) -> None:
        for key_id, raw in self.keys.items():
            if not isinstance(raw, bytes) or len(raw) != _RAW_KEY_BYTES or _key_id(raw) != key_id:
                raise DiscoveryError(f"{self.source}: key {key_id!r} is not a 32-byte public key")
        object.__setattr__(self, "keys", dict(sorted(self.keys.items())))

    @classmethod
    def from_pem(cls, data: bytes, source: str = "PEM keys") -> MembershipKeys:
        """Every key in ``data``: ``PUBLIC KEY`` blocks, and ``PRIVATE KEY`` blocks (their
        public halves), so a replica's own key file also verifies.

        Raises
        ------
        DiscoveryError
            If a block is not an Ed25519 key, or there is none.
        """
        from cryptography.hazmat.primitives import serialization

        ed25519 = _crypto()
        found: dict[str, bytes] = {}
        for match in _PEM_BLOCK.finditer(data):
            block, kind = match.group(0), match.group(1)
            if kind == b"PUBLIC KEY":
                try:
                    key = serialization.load_pem_public_key(block)
                except (ValueError, TypeError) as exc:
                    raise DiscoveryError(f"{source}: a malformed PUBLIC KEY block: {exc}") from None
                if not isinstance(key, ed25519.Ed25519PublicKey):
                    raise DiscoveryError(
                        f"{source}: a {type(key).__name__}, not an Ed25519 public key"
                    )
                raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            elif kind == b"PRIVATE KEY":
                raw = MembershipKey.from_pem(block, source).public_key
            else:
                continue
            found[_key_id(raw)] = raw
        if not found:
            raise DiscoveryError(
                f"{source} holds no PUBLIC KEY (or PRIVATE KEY) PEM block; give the public key "
                "of the replicas' membership key ('spark-statestore membership-key public')"
            )
        return cls(found, source)

    @classmethod
    def load(cls, paths: str | Iterable[str], option: str) -> MembershipKeys:
        """The keys in the PEM file(s) at ``paths`` (a comma-separated text or a list),
        named by ``option`` in errors.

        Raises
        ------
        DiscoveryError
            Naming ``option`` and the path, when a file is unreadable or holds no key.
        """
        names = [p.strip() for p in paths.split(",")] if isinstance(paths, str) else list(paths)
        keys: dict[str, bytes] = {}
        for path in names:
            if not path:
                continue
            data = _read_key_file(path, f"option {option}")
            keys.update(cls.from_pem(data, f"option {option}: {path}").keys)
        if not keys:
            raise DiscoveryError(f"option {option}: name at least one key file")
        return cls(keys, f"option {option}")

    @classmethod
    def default(cls) -> MembershipKeys:
        """The public half of this user's default key; none (verifying nothing) when it
        does not exist or cannot be read (no replica of this user has announced)."""
        path = default_key_path()
        if not os.path.exists(path):
            return cls({}, f"the default membership key {path} (missing)")
        try:
            return MembershipKey.load(path, DEFAULT_KEY_ENV).verifier()
        except DiscoveryError:
            return cls({}, f"the default membership key {path} (unreadable)")

    def to_pem(self) -> bytes:
        """The keys as PEM ``PUBLIC KEY`` blocks (picklable and shippable as bytes)."""
        from cryptography.hazmat.primitives import serialization

        ed25519 = _crypto()
        return b"".join(
            ed25519.Ed25519PublicKey.from_public_bytes(raw).public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            for raw in self.keys.values()
        )

    def verify(self, key_id: str, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` is ``key_id``'s valid signature of ``message``."""
        from cryptography.exceptions import InvalidSignature

        raw = self.keys.get(key_id)
        if raw is None:
            return False
        try:
            _crypto().Ed25519PublicKey.from_public_bytes(raw).verify(signature, message)
        except InvalidSignature:
            return False
        return True
