"""MkDocs hooks (``hooks:`` in mkdocs.yml): the docs pages generated from the code.

A page holding a ``<!-- generated: NAME -->`` line gets it replaced at build time:

- ``cli``: every ``durable`` command, from :func:`durable_core.cli.build_parser`;
- ``schema-versions``: the schema versions, from :data:`durable_core.sql.schema_history.VERSIONS`;
- ``api``: a mkdocstrings entry for every name of ``durable_core.__all__``, grouped by
  the module that defines it.

So these pages cannot drift from the code: a renamed command, a new schema version or a
new public name shows on the next build.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.MULTILINE)
# A Sphinx role of a docstring (``:class:`~durable_core.errors.StoreError```) as Markdown
# renders it: the role's name, then the target in <code>, its module dropped after a ``~``.
SPHINX_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):<code>(~?)([^<]*)</code>"
)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each ``<!-- generated: NAME -->`` line by what ``NAME`` renders."""

    def render(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"docs: no generator named {name!r} (known: {sorted(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(render, markdown)


def on_page_content(html: str, **_: Any) -> str:
    """Show the Sphinx roles of the docstrings (``:class:`X```) as code, without the role."""

    def render(match: re.Match[str]) -> str:
        target = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{target}</code>"

    return SPHINX_ROLE.sub(render, html)


# -- the CLI -----------------------------------------------------------------------------------


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[argparse.ArgumentParser, str | None]]:
    """Each subcommand's parser with its one-line help, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield sub, helps.get(name)
                yield from _subcommands(sub)


def _cell(text: str) -> str:
    """``text`` on one line, its Markdown characters escaped (a help text is plain text)."""
    text = " ".join(text.split())
    for char in "\\|*_[]<`":
        text = text.replace(char, "\\" + char)
    return text


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else None
        value = action.metavar or choices
        name = ", ".join(action.option_strings) or str(value or action.dest)
        if action.option_strings and action.nargs != 0:
            name += f" {value or action.dest.upper()}"
        text = (action.help or "") % {"default": action.default, "prog": parser.prog}
        rows.append(f"| `{name}` | {_cell(text)} |")
    if not rows:
        return []
    return ["| argument | meaning |", "| --- | --- |", *rows, ""]


def _command(parser: argparse.ArgumentParser, level: int, summary: str | None) -> list[str]:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    usage = re.sub(r"\n\s+", "\n    ", usage)
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    for text in (summary, parser.description):
        if text and text != argparse.SUPPRESS:
            lines += [_cell(text), ""]
    lines += ["```text", usage, "```", ""]
    return lines + _options(parser)


def cli() -> str:
    """The reference of every ``durable`` command, from its argparse parser."""
    from durable_core.cli import build_parser

    parser = build_parser()
    lines = _command(parser, 3, None)
    for sub, summary in _subcommands(parser):
        lines += _command(sub, 4 if sub.prog.count(" ") == 1 else 5, summary)
    return "\n".join(lines)


# -- the schema versions -----------------------------------------------------------------------


def schema_versions() -> str:
    """A table of the schema versions and what each adds, from the schema's history."""
    from alembic.operations import ops

    from durable_core.sql.schema_history import VERSIONS

    def what(op: ops.MigrateOperation) -> str:
        if isinstance(op, ops.CreateTableOp):
            return f"table `{op.table_name}`"
        if isinstance(op, ops.CreateIndexOp):
            return f"index `{op.index_name}`"
        if isinstance(op, ops.AddColumnOp):
            return f"column `{op.table_name}.{op.column.name}`"
        return type(op).__name__

    lines = ["| version | Alembic revision slug | what it does | adds |", "| --- " * 4 + "|"]
    for version in VERSIONS:
        adds = ", ".join(what(op) for op in version.operations())
        lines.append(f"| {version.number} | `{version.slug}` | {version.message} | {adds} |")
    return "\n".join(lines) + "\n"


# -- the API -----------------------------------------------------------------------------------


def api() -> str:
    """A mkdocstrings entry for each public name of ``durable_core``, by defining module."""
    import durable_core

    groups: dict[str, list[str]] = {}
    for name in durable_core.__all__:
        value = getattr(durable_core, name)
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or not module.startswith("durable_core"):
            module = "durable_core"
        groups.setdefault(module, []).append(name)
    lines = []
    for module, names in sorted(groups.items()):
        lines += [f"## `{module}`", ""]
        for name in names:
            lines += [f"::: durable_core.{name}", "    options:", "      heading_level: 3"]
            # Store is the union of the roles, DurableClient is built of method groups
            # (caller/admin.py, schedule_admin.py, oncall.py): their methods are its own.
            if name in ("Store", "DurableClient"):
                lines.append("      inherited_members: true")
            lines.append("")
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli,
    "schema-versions": schema_versions,
    "api": api,
}
