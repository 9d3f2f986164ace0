"""The one rule that keeps credentials out of text leaving the process.

:func:`redact` is applied to every store's description, every
:class:`~durable_core.errors.FrameworkError` message, the dashboard's pages and
the log records of durable's loggers (:func:`get_logger`, and the ``durable``
command's log handler, through :class:`RedactingFilter`).

It hides each credential form libpq, asyncpg, SQLAlchemy and the MySQL drivers
accept: the password in a URL's userinfo (``scheme://user:secret@host``, however
it is encoded), a ``password``-like parameter in a URL's query
(``?password=``, ``sslpassword=``, ``passfile=``...: to the next parameter, whatever
the value holds) or in a keyword DSN
(``host=db password='se cret'``, ``PGPASSWORD=...``), and the same keys in a
repr or JSON (``password='x'``, ``"password": "x"``).
"""

from __future__ import annotations

import logging
import re

MASK = "***"

_USERINFO = re.compile(
    # scheme://user:password@ -- up to the authority's last "@" (a password may hold "@",
    # "/", "?" unencoded: hide too much rather than too little).
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:'\"]*):(?P<secret>[^\s'\"]*)@"
)
_KEY = r"\b\w*(?:pass(?:word|wd|phrase|file)?|pwd|secret|token|api_?key)"
_VALUE = (
    r"'(?:[^'\\]|\\.)*'"  # libpq's quoting, a Python repr
    r"|\"(?:[^\"\\]|\\.)*\""  # JSON
    # Unquoted: to a space, a quote or a separator; an "&" ends it only before "key=".
    r"|(?:[^\s'\",;&#)}\]]|&(?![\w.\-]+=))+"
)
_KEYED = re.compile(
    rf"(?P<key>{_KEY})(?P<sep>\s*=\s*|[\"']\s*:\s*)(?P<value>{_VALUE})", re.IGNORECASE
)
_QUERY_KEYED = re.compile(
    # A URL query's parameter runs to the next "&key=" or the URL's end: a quote, ";", ","
    # or ")" inside it is part of the secret (masking what follows is the safe mistake).
    rf"(?P<lead>[?&])(?P<key>{_KEY})(?P<sep>=)(?P<value>(?:[^\s&]|&(?![\w.\-]+=))+)",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|api_?key", re.IGNORECASE)
_HINT = re.compile(r"pass|pwd|secret|token|key|://", re.IGNORECASE)
_PLACEHOLDERS = frozenset({"password", MASK})
"""Values that stand for a password in documentation (``user:password@host``): kept."""


def redact(text: str) -> str:
    """``text`` with every credential it holds replaced by ``***``."""
    if not _HINT.search(text):
        return text
    text = _USERINFO.sub(_mask_userinfo, text)
    text = _QUERY_KEYED.sub(_mask_query, text)
    return _KEYED.sub(_mask_value, text)


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` holds a credential (``password``,
    ``sslpassword``, ``passfile``, ``api_key``...): a URL's description shows ``***``."""
    return bool(_SECRET_NAME.search(name))


def redact_tree(value: object) -> object:
    """``value`` with :func:`redact` applied to every text in it (lists, tuples and dicts
    walked; a JSON log record's fields, say)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_tree(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(item) for item in value]
    return value


def _mask_userinfo(match: re.Match[str]) -> str:
    if match["secret"] in _PLACEHOLDERS:
        return match[0]
    return f"{match['head']}:{MASK}@"


def _mask_query(match: re.Match[str]) -> str:
    if match["value"] in _PLACEHOLDERS:
        return match[0]
    return f"{match['lead']}{match['key']}={MASK}"


def _mask_value(match: re.Match[str]) -> str:
    value = match["value"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    if value.strip("'\"") in _PLACEHOLDERS:
        return match[0]
    return f"{match['key']}{match['sep']}{quote}{MASK}{quote}"


class RedactingFilter(logging.Filter):
    """Rewrites a log record's message (and its traceback text) through :func:`redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            # Formatters reuse exc_text when it is set: the traceback is shown redacted.
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


REDACTING = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, its records redacted (every durable logger is made here)."""
    logger = logging.getLogger(name)
    if REDACTING not in logger.filters:
        logger.addFilter(REDACTING)
    return logger
