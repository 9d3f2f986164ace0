"""Benchmarks for durable-core on PostgreSQL, each figure beside a bare-asyncpg floor.

Run ``python -m bench [--url URL] [--smoke] [--only NAME]``. The floor issues
the same number and kind of round trips as the framework (the SQL strings are
imported from :mod:`durable_postgres.store`), measured in the same run, so the
ratio stays meaningful on a noisy shared machine.
"""

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/durable_bench"
"""Where the suite runs unless ``--url`` or ``DURABLE_BENCH_URL`` says otherwise."""
