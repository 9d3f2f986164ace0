"""A FastAPI shop on durable workflows: an order placed at most once, paid by a webhook,
its receipt emailed once.

    DURABLE_DATABASE_URL=postgresql://app@db/app durable migrate
    DURABLE_DATABASE_URL=... durable worker --app examples.shop.workflows
    DURABLE_DATABASE_URL=... uvicorn --factory examples.shop.app:create_app

Tests: ``pytest examples/shop`` (with ``--durable-postgres-url`` for the worker test).
"""
