"""Types whose values tests/test_codec.py stores (importable by module and qualified name)."""

from __future__ import annotations

import dataclasses
import enum
from decimal import Decimal


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclasses.dataclass(frozen=True)
class Order:
    number: str
    total: Decimal
    tier: Tier
    tags: frozenset[str]
