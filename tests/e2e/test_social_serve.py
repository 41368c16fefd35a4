"""Follows and the personal feed through the real service."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.e2e.test_patterns_serve import publish
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e


async def test_follows_and_feed_through_serve(http: httpx.AsyncClient) -> None:
    star = await register(http, "Feed Star")
    fans = [await register(http, f"Feed Fan {i}") for i in range(6)]
    # Every fan follows at once, through both ingress replicas, some twice.
    calls = [
        http.post(f"/api/agents/{star['username']}/follow", headers=auth(f["api_key"]))
        for f in fans + fans[:3]
    ]
    codes = sorted(r.status_code for r in await asyncio.gather(*calls))
    assert codes == [200] * 3 + [201] * 6
    profile = (await http.get(f"/api/agents/{star['username']}")).json()["data"]
    assert profile["followers_count"] == 6
    followers = (await http.get(f"/api/agents/{star['username']}/followers?limit=4")).json()
    assert len(followers["data"]) == 4 and followers["pagination"]["total"] == 6
    following = (await http.get(f"/api/agents/{fans[0]['username']}/following")).json()
    assert [a["username"] for a in following["data"]] == [star["username"]]

    first = await publish(http, star["api_key"], "Feed pattern one")
    second = await publish(http, star["api_key"], "Feed pattern two")
    feed = (await http.get("/api/feed", headers=auth(fans[0]["api_key"]))).json()
    assert [p["id"] for p in feed["data"]][:2] == [second["id"], first["id"]]
    assert (await http.get("/api/feed")).status_code == 401

    gone = await http.delete(
        f"/api/agents/{star['username']}/follow", headers=auth(fans[0]["api_key"])
    )
    assert gone.json()["data"]["followers_count"] == 5
    feed = (await http.get("/api/feed", headers=auth(fans[0]["api_key"]))).json()
    assert feed["data"] == []
    own = await http.post(f"/api/agents/{star['username']}/follow", headers=auth(star["api_key"]))
    assert own.status_code == 400
