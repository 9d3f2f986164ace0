"""MkDocs hooks (``hooks:`` in mkdocs.yml): the docs pages generated from the code.

A page holding a ``<!-- generated: NAME -->`` line gets it replaced at build time:

- ``cli``: every ``durable`` command, from :func:`durable_core.cli.build_parser`;
- ``schema-versions``: the schema versions, from :data:`durable_core.sql.schema_history.VERSIONS`;
- ``api``: a mkdocstrings entry for every name of ``durable_core.__all__``, grouped by
  the module that defines it;
- ``api-modules``: one for every name of the other public modules' ``__all__``
  (:data:`PUBLIC_MODULES`: the backends, the test runner, the contract suite) and the
  blocking client.

So these pages cannot drift from the code: a renamed command, a new schema version or a
new public name shows on the next build.

Two checks run at every build, and fail a strict one: every page is in the nav or linked
from the home page (:func:`unreachable_pages`), and every name of a public module's
``__all__`` has its entry in the built API reference (:func:`missing_api_entries`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger("mkdocs.plugins.durable_docs")

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


def on_page_content(html: str, page: Any = None, **_: Any) -> str:
    """Show the Sphinx roles of the docstrings (``:class:`X```) as code, without the role;
    on the API page, warn of a public name without its entry."""

    def render(match: re.Match[str]) -> str:
        target = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{target}</code>"

    if page is not None and page.file.src_uri == API_PAGE:
        for name in missing_api_entries(html):
            log.warning("the API reference has no entry for the public name %s", name)
    return SPHINX_ROLE.sub(render, html)


def on_nav(nav: Any, config: Any, files: Any) -> Any:
    """Warn of a page that neither the nav nor the home page leads to."""
    in_nav = {page.file.src_uri for page in nav.pages}
    pages = [f.src_uri for f in files if f.src_uri.endswith(".md")]
    home = next(f for f in files if f.src_uri == HOME_PAGE)
    for uri in unreachable_pages(pages, in_nav, home.content_string):
        log.warning("the page %s is neither in the nav nor linked from the home page", uri)
    return nav


# -- the checks --------------------------------------------------------------------------------

HOME_PAGE = "index.md"
API_PAGE = "reference/api.md"
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)\s]*)?\)")


def linked_pages(markdown: str, page: str = HOME_PAGE) -> set[str]:
    """The pages ``markdown`` (the page ``page``) links to, as paths under ``docs/``."""
    base = posixpath.dirname(page)
    return {posixpath.normpath(posixpath.join(base, link)) for link in LINK.findall(markdown)}


def unreachable_pages(pages: Iterable[str], in_nav: set[str], home: str) -> list[str]:
    """The pages (paths under ``docs/``) in neither ``in_nav`` nor the home page's links."""
    linked = linked_pages(home) | {HOME_PAGE}
    return sorted(page for page in pages if page not in in_nav and page not in linked)


def public_names() -> list[str]:
    """Every public name the API reference must have: ``durable_core.__all__`` and the
    ``__all__`` of each module of :data:`PUBLIC_MODULES`, qualified."""
    import durable_core

    names = [f"durable_core.{name}" for name in durable_core.__all__]
    for module, _ in PUBLIC_MODULES:
        names += [f"{module}.{name}" for name in _exported(module)]
    return names + SYNC_CLIENT


def missing_api_entries(html: str) -> list[str]:
    """The public names whose entry (the anchor mkdocstrings gives it) ``html`` lacks."""
    return [name for name in public_names() if f'id="{name}"' not in html]


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

    head = "| version | Alembic revision slug | what it does | adds | additive |"
    lines = [head, "| --- " * 5 + "|"]
    for version in VERSIONS:
        adds = ", ".join(what(op) for op in version.operations())
        additive = "yes" if version.additive else "**no**"
        lines.append(
            f"| {version.number} | `{version.slug}` | {version.message} | {adds} | {additive} |"
        )
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


PUBLIC_MODULES: list[tuple[str, str]] = [
    ("durable_sqlite", "The SQLite backend: `pip install 'durable-core[sqlite]'`."),
    ("durable_postgres", "The PostgreSQL backend: `pip install 'durable-core[postgres]'` "
     "(`EmbeddedPostgres`: `[embedded]`)."),
    ("durable_mysql", "The MySQL / MariaDB backend: `pip install 'durable-core[mysql]'`."),
    ("durable_core.testing", "Running workflows in tests: the runner, its clock, and "
     "`MemoryStore`, the fastest store for them ([Testing your "
     "workflows](../tutorials/testing.md))."),
    ("durable_core.contract", "The store contract suite, for the authors of a store "
     "([Writing a store plugin](../how-to/store-plugin.md)); each class's tests are its "
     "members."),
]  # fmt: skip
"""The public modules besides ``durable_core`` whose ``__all__`` the API page documents."""

SYNC_CLIENT = ["durable_core.caller.sync.SyncClient", "durable_core.caller.sync_handle.SyncHandle"]
"""The blocking client's public classes."""


def _exported(module: str) -> list[str]:
    names: list[str] = importlib.import_module(module).__all__
    return names


def api_modules() -> str:
    """A mkdocstrings entry for each name of the public modules besides ``durable_core``."""
    lines = []
    for module, summary in PUBLIC_MODULES:
        lines += [f"## `{module}`", "", summary, ""]
        for name in _exported(module):
            lines += [f"::: {module}.{name}", "    options:", "      heading_level: 3"]
            # A contract class's members are its tests; a dialect's and a connector's, the
            # SQL layer's hooks (see the store plugin guide): the docstring says enough.
            if module == "durable_core.contract" or name.endswith(("Dialect", "Connector")):
                lines.append("      members: false")
            lines.append("")
    lines += [
        "## `durable_core.caller.sync`",
        "",
        "The blocking client, for Django, Flask and scripts: every method of "
        "`DurableClient`, each blocking until done.",
        "",
    ]
    for name in SYNC_CLIENT:
        lines += [f"::: {name}", "    options:", "      heading_level: 3"]
        lines += ["      members: false", ""]
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli,
    "schema-versions": schema_versions,
    "api": api,
    "api-modules": api_modules,
}
