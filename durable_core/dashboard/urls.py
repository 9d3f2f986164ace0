"""The URL of a workflow's page, for any id a caller may choose."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request

DOT_IDS = (".", "..")
"""The ids a browser would read as a step of the path (``/workflows/..`` is ``/``): their
pages take the id from the query (``workflows/?id=..``)."""


def workflow_url(request: Request, workflow_id: str, **query: object) -> str:
    """The URL of workflow ``workflow_id``'s page, whatever its id holds (``/``, ``#``,
    ``?``, ``%``, spaces, any script: one path segment, every reserved character
    percent-encoded), with ``query`` (``None`` values left out)."""
    wanted = {key: value for key, value in query.items() if value is not None}
    if workflow_id in DOT_IDS:
        path, wanted = "workflows/", {"id": workflow_id, **wanted}
    else:
        path = "workflows/" + quote(workflow_id, safe="")
    url = f"{request.url_for('workflows')}{path}"
    return f"{url}?{urlencode(wanted)}" if wanted else url
