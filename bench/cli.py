"""The ``python -m bench`` command line."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import anyio
import asyncpg

from bench import DEFAULT_URL, report, scenarios
from bench.common import (
    RESULTS_DIR,
    ScenarioResult,
    Settings,
    ensure_database,
    prepare_schema,
    server_facts,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="durable-core benchmarks, each figure beside a bare-asyncpg floor.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("DURABLE_BENCH_URL", DEFAULT_URL),
        help="PostgreSQL URL of a database the bench may empty "
        "(default: $DURABLE_BENCH_URL or %(default)s)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every code path with tiny sizes (seconds); exits non-zero on any error",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help=f"run only these scenarios (repeatable or comma-separated): "
        f"{', '.join(scenarios.BY_NAME)}",
    )
    return parser


def _selected(only: list[str] | None) -> list[ModuleType]:
    if not only:
        return list(scenarios.ALL)
    names = [name.strip() for item in only for name in item.split(",") if name.strip()]
    unknown = [name for name in names if name not in scenarios.BY_NAME]
    if unknown:
        raise SystemExit(
            f"bench: unknown scenario {', '.join(unknown)}; one of {', '.join(scenarios.BY_NAME)}"
        )
    return [module for module in scenarios.ALL if module.NAME in names]


async def _run(settings: Settings, modules: list[ModuleType]) -> dict[str, Any]:
    await ensure_database(settings.url)
    await prepare_schema(settings.url)
    conn = await asyncpg.connect(settings.dsn)
    try:
        server = await server_facts(conn)
    finally:
        await conn.close()
    payload: dict[str, Any] = {"machine": report.machine_facts(server), "smoke": settings.smoke}
    results: list[ScenarioResult] = []
    for module in modules:
        result = ScenarioResult(module.NAME, module.TITLE)
        print(f"bench: {module.NAME} ...", flush=True)
        started = time.perf_counter()
        try:
            await module.run(settings, result)
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        result.seconds = time.perf_counter() - started
        print(f"bench: {module.NAME} done in {result.seconds:.1f}s", flush=True)
        print(report.tables([result]), flush=True)
        results.append(result)
    payload["results"] = results
    return payload


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected scenarios; write the JSON (and, for a full run, RESULTS.md)."""
    args = _parser().parse_args(argv)
    settings = Settings(url=args.url, smoke=args.smoke)
    modules = _selected(args.only)
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    started = time.perf_counter()
    payload = anyio.run(_run, settings, modules)
    payload["seconds"] = time.perf_counter() - started
    payload["command"] = command
    results: list[ScenarioResult] = payload.pop("results")
    payload["scenarios"] = {
        r.name: {
            "title": r.title,
            "seconds": r.seconds,
            "error": r.error,
            "figures": [f.as_dict() for f in r.figures],
            "details": r.details,
        }
        for r in results
    }
    kind = "smoke" if settings.smoke else ("full" if not args.only else "partial")
    report.write_json(RESULTS_DIR / f"{kind}.json", payload)
    if kind == "full":
        report.update_markdown(report.render(payload, results))
    errors = [r for r in results if r.error]
    print(
        f"bench: {len(results) - len(errors)} of {len(results)} scenarios ran in "
        f"{payload['seconds']:.0f}s; results in {RESULTS_DIR / (kind + '.json')}",
        flush=True,
    )
    if errors:
        for r in errors:
            print(f"bench: {r.name} FAILED: {r.error}", file=sys.stderr)
        return 1
    return 0
