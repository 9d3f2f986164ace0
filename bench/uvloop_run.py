"""``python -m bench.uvloop_run worker ...``: the ``durable`` command on uvloop's event loop.

``durable worker`` itself runs on uvloop when it is installed (``DURABLE_EVENT_LOOP``);
this sets uvloop's event loop policy for any command, so the bench can compare the two
(``bench.profile_worker --uvloop``, with ``DURABLE_EVENT_LOOP=asyncio`` for the other);
needs ``pip install 'durable-core[uvloop]'`` (``bench/RESULTS.md``).
"""

from __future__ import annotations

import asyncio

import uvloop

from durable_core.cli import run

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    run()
