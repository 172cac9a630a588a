"""What a record whose position headers are missing or malformed does (one policy, one enum).

Kafka Streams fails on a changelog record with ``v`` = 0 and no valid ``c`` header. The
follower, the Spark source (option ``onMissingPosition``) and ``spark-statestore tail``
(``--on-missing-position``) can instead skip that record's position and count it.
"""

from __future__ import annotations

from enum import Enum

from spark_statestore.errors import OptionError

__all__ = ["OnMissingPosition"]


class OnMissingPosition(Enum):
    """A record with ``v`` = 0 and no valid ``c`` header: fail naming it, or skip its position.

    ``SKIP`` keeps the record without a position (a ``SKIPPED``
    :class:`~spark_statestore.changelog.headers.HeaderDecision`) so the caller can count it.
    """

    FAIL = "fail"
    SKIP = "skip"

    @classmethod
    def check(cls, value: object, name: str = "on_missing") -> OnMissingPosition:
        """``value`` if it is a member, checked where the policy enters the engine.

        Raises
        ------
        OptionError
            Naming ``name`` when ``value`` is anything else (a string included: ``"skip"``
            is the Spark option's text, not the policy).
        """
        if not isinstance(value, cls):
            raise OptionError(
                f"{name} must be OnMissingPosition.FAIL or OnMissingPosition.SKIP, got {value!r}"
            )
        return value
