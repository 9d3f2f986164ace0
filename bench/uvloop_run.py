"""``python -m bench.uvloop_run worker ...``: the ``durable`` command on uvloop's event loop.

The framework runs its commands with ``anyio.run`` on asyncio's default loop; this
sets uvloop's event loop policy first, so the same worker runs on uvloop. Used by the
bench to measure whether uvloop pays (``bench.profile_worker --uvloop``); needs
``pip install uvloop``, which is in no extra: it did not pay (``bench/RESULTS.md``).
"""

from __future__ import annotations

import asyncio

import uvloop

from durable_core.cli import run

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    run()
