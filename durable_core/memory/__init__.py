"""A store in plain Python: :class:`MemoryStore` (``durable_core.testing.MemoryStore``).

Its tables are dicts (:mod:`.tables`); its operations keep the rules the SQL stores keep
(:mod:`durable_core.sql`): the running side (:mod:`.attempts`), an operator's writes
(:mod:`.admin`), the reads (:mod:`.reading`), streams, updates, attributes and debounce
(:mod:`.talk`) and schedules (:mod:`.schedules`). It imports the seams, the codec and
the SQL package's row readers and repeat rule (no statement), and nothing above them.
"""

from __future__ import annotations

from .store import MemoryStore
from .tables import Tables

__all__ = ["MemoryStore", "Tables"]
