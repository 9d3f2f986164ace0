"""An example durable-core store plugin: ``example+sqlite:///`` and ``example+sql:///`` URLs."""

from .sqlstore import ExampleSQLStore
from .store import ExampleStore

__all__ = ["ExampleSQLStore", "ExampleStore"]
