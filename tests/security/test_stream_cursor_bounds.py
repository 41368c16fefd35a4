"""Issue 30, finding 2: a `Last-Event-ID` whose txid or seq half does not fit
a signed 64-bit bigint is refused with a 400 before any stream opens.

Such a cursor used to pass (32 hex digits) and the stream died on a database
error (bigint out of range) right after its `ready` event."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from serve_app.services import notifications as notification_service
from storage.repositories.notifications import Cursor
from tests.api.conftest import assert_error, register

TOO_BIG = 2**63  # the first value a signed bigint cannot hold
BIGGEST = 2**63 - 1

OUT_OF_RANGE = [
    Cursor(TOO_BIG, 0).encode(),  # txid half
    Cursor(1, TOO_BIG).encode(),  # seq half
    "f" * 32,  # both
    ("8" + "0" * 15 + "0" * 16).upper(),
]


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_decode_refuses_halves_beyond_a_bigint(value: str) -> None:
    assert Cursor.decode(value) is None
    with pytest.raises(Exception, match="Last-Event-ID"):
        notification_service.stream_cursor(value)


def test_the_largest_bigints_still_decode() -> None:
    edge = Cursor(BIGGEST, BIGGEST)
    assert Cursor.decode(edge.encode()) == edge
    assert Cursor.decode(Cursor(0, 0).encode()) == Cursor(0, 0)


@pytest.mark.parametrize("value", OUT_OF_RANGE)
async def test_the_route_answers_400_before_the_stream_opens(
    client: httpx.AsyncClient, value: str
) -> None:
    me = await register(client, "Far Cursor")
    # A stream that opened would run until the database error: bounded here so
    # the unfixed code fails instead of hanging the suite.
    async with asyncio.timeout(30):
        by_header = await client.get(
            "/api/notifications/stream", headers={**me.auth, "Last-Event-ID": value}
        )
        by_query = await client.get(
            "/api/notifications/stream", params={"last_event_id": value}, headers=me.auth
        )
    for response in (by_header, by_query):
        assert_error(response, 400, "validation_error")
        assert "Last-Event-ID" in response.json()["message"]
