"""PostgreSQL backend for durable-core: the store and the only claimer.

:class:`PostgresStore` runs every operation as one statement over an asyncpg
pool, claims with ``FOR UPDATE SKIP LOCKED``, fences every execution-side
write by the lease token, and wakes workers through ``LISTEN/NOTIFY``.
:class:`EmbeddedPostgres` starts a local server from the ``pgserver`` wheel
(the ``[embedded]`` extra) for a zero set-up quick start.
"""

from .embedded import EmbeddedPostgres
from .store import PostgresStore

__all__ = ["EmbeddedPostgres", "PostgresStore"]
