"""The shared SQL store: every rule about a workflow row, over any dialect and driver.

A store plugin for a SQL database can reuse it whole by supplying a
:class:`SQLDialect` (how the database spells the clock and an upsert) and a
:class:`Connector` (how to run a statement); :class:`SQLAlchemyConnector`
already covers any database SQLAlchemy's async engine reaches.
"""

from .connector import Connector, Row, Session, SQLAlchemyConnector, classify_sqlalchemy
from .dialect import Excluded, SQLDialect, const
from .errors import Failure
from .statements import Statements
from .store import SQLStore

__all__ = [
    "Connector",
    "Excluded",
    "Failure",
    "Row",
    "SQLAlchemyConnector",
    "SQLDialect",
    "SQLStore",
    "Session",
    "Statements",
    "classify_sqlalchemy",
    "const",
]
