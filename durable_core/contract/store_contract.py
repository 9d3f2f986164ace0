"""``StoreContract``: the whole store contract suite, one class per role of
:mod:`durable_core.seams.roles` put together, for a store that plays every role (a
:class:`~durable_core.seams.store.Store`). A store that plays fewer subclasses the
classes of the roles it plays instead (see :mod:`durable_core.contract`)."""

from __future__ import annotations

from .admin_contract import AdminContract
from .attempt_contract import AttemptContract
from .caller_contract import CallerContract
from .effects_contract import EffectsContract
from .engine_contract import EngineContract
from .listing_contract import ListingContract
from .run_contract import RunContract
from .schedule_contract import ScheduleContract
from .waiting_contract import WaitingContract

__all__ = ["StoreContract"]


class StoreContract(
    CallerContract,
    RunContract,
    AttemptContract,
    AdminContract,
    EngineContract,
    WaitingContract,
    EffectsContract,
    ScheduleContract,
    ListingContract,
):
    """The store contract suite. Subclass it in a test module that has a ``durable_store``
    fixture (an opened store, schema applied, tables empty)::

        class TestMyStore(StoreContract):
            pass

    Optional fixtures (defaults come from the ``durable_core_contract`` pytest plugin):

    ``durable_second_store``
        A second, separately opened instance on the same database, for the concurrency
        tests (default: ``durable_store`` itself).
    ``durable_tamper``
        Writes raw values into rows to simulate corruption (default: through the store's
        SQLAlchemy ``engine``; override it for stores without one).

    Class attributes tune timing: ``clock_tolerance`` is how far a store's clock may be
    from the test process's, ``short_lease`` the lease (seconds) used to make one expire.
    """
