"""``every.flow`` unchanged, in the default registry (for ``durable replay-check --app``)."""

from tests.replay_apps.every import define

define(None, inserted=False)
