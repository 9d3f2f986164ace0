"""An example durable-core store plugin: ``example+sqlite:///path`` URLs."""

from .store import ExampleStore

__all__ = ["ExampleStore"]
