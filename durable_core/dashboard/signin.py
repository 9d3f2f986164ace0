"""Signing in to the dashboard: the token's rules, the sessions a sign-in opens, and the
slow-down of a client that keeps guessing.

- Token: at least :data:`MIN_TOKEN_LENGTH` characters (an empty one, from an unset shell
  variable, would otherwise open every page), compared in constant time.
- Sessions: a sign-in opens a session under a new random id (256 bits, the only thing
  the cookie holds), kept in this process's memory with its expiry. Signing out ends
  it at once; so does its expiry (``max_age``). A sign-in always opens a new session
  and ends the one the browser had (no fixation). Nothing survives a restart: a new
  process (a new token, say) signs everyone out. Several dashboard processes behind one
  name each keep their own sessions: route a browser to one (sticky sessions), or
  sign in through a proxy that sends the bearer token.
- Guessing: after :data:`FREE_FAILURES` wrong tokens in a row from one client address,
  each further wrong one shuts that address out for twice as long as the last (from one
  second up to :data:`MAX_LOCKOUT` seconds); while it is shut out nothing it sends is
  checked. Every wrong token is logged with the address.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigurationError
from ..redaction import get_logger

logger = get_logger("durable_core.dashboard")

MIN_TOKEN_LENGTH = 16
"""The shortest token the dashboard accepts (``openssl rand -hex 32`` makes a good one)."""
MAX_SESSIONS = 10_000
"""Sessions kept at most; beyond, the oldest is ended."""
FREE_FAILURES = 5
"""Wrong tokens in a row from one address before it is slowed down."""
MAX_LOCKOUT = 300.0
"""The longest an address is shut out after a wrong token, in seconds."""
_CLIENTS = 10_000
"""Addresses whose failures are remembered at most (the oldest forgotten first)."""


def check_token(token: str | None, where: str = "the dashboard's token") -> str | None:
    """``token`` if it may guard the dashboard (``None``: no sign-in); else a
    :class:`ConfigurationError`: an empty or short token guards nothing."""
    if token is None:
        return None
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
        size = len(token) if isinstance(token, str) else type(token).__name__
        raise ConfigurationError(
            f"{where} is {'empty' if size == 0 else f'{size} characters'}: give one of at "
            f"least {MIN_TOKEN_LENGTH} characters (openssl rand -hex 32 makes one)"
        )
    return token


def same_token(given: str, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


@dataclass
class _Session:
    expires: float


class Sessions:
    """The open sessions, by their random id (this process's memory)."""

    def __init__(self, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self._open: OrderedDict[str, _Session] = OrderedDict()

    def open(self, replacing: str | None = None) -> str:
        """A new session's id (and the end of ``replacing``, the browser's old one)."""
        if replacing:
            self.end(replacing)
        session_id = secrets.token_urlsafe(32)
        self._open[session_id] = _Session(self.clock() + self.max_age)
        while len(self._open) > MAX_SESSIONS:
            self._open.popitem(last=False)
        return session_id

    def valid(self, session_id: str | None) -> bool:
        """Whether ``session_id`` names an open session that has not expired."""
        if not session_id:
            return False
        session = self._open.get(session_id)
        if session is None:
            return False
        if session.expires <= self.clock():
            del self._open[session_id]
            return False
        return True

    def end(self, session_id: str | None) -> None:
        """End the session ``session_id`` (nothing if there is none)."""
        if session_id:
            self._open.pop(session_id, None)

    def end_all(self) -> None:
        """End every session."""
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)


@dataclass
class _Failures:
    count: int = 0
    until: float = 0.0


class Throttle:
    """Wrong tokens per client address, and how long each address is shut out."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._by_client: OrderedDict[str, _Failures] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds ``client`` is still shut out (0: it may try)."""
        failures = self._by_client.get(client)
        if failures is None:
            return 0.0
        return max(failures.until - self.clock(), 0.0)

    def failed(self, client: str) -> None:
        """Count a wrong token from ``client``, shut it out past its free tries, log it."""
        failures = self._by_client.pop(client, None) or _Failures()
        failures.count += 1
        self._by_client[client] = failures
        while len(self._by_client) > _CLIENTS:
            self._by_client.popitem(last=False)
        over = failures.count - FREE_FAILURES
        if over > 0:
            lockout = min(2.0 ** (over - 1), MAX_LOCKOUT)
            failures.until = self.clock() + lockout
            logger.warning(
                "dashboard: wrong token from %s (%d in a row): refusing it for %.0f s",
                client,
                failures.count,
                lockout,
            )
        else:
            logger.warning("dashboard: wrong token from %s (%d in a row)", client, failures.count)

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures (it signed in)."""
        self._by_client.pop(client, None)
