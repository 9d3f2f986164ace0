"""``every.flow`` with a step inserted at its start and no patch, in the default registry
(for ``durable replay-check --app``): every history in flight diverges at index 0."""

from tests.replay_apps.every import define

define(None, inserted=True)
