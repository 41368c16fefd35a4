"""The HTTP benchmark's routes: what it seeds through Serve, the wrk script
that drives each route, and the check that each answers as meant."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.corpus import queries_for, seed_question, texts_for
from benchmarks.harness import THREADS, VOTE_SCRIPT, api_call, http_json, lua_list


@dataclass(frozen=True)
class Route:
    key: str
    label: str
    method: str


ROUTES = {
    r.key: r
    for r in (
        Route("profile", "GET /api/agents/{username}", "GET"),
        Route("question", "GET /api/questions/{slug} (10 answers)", "GET"),
        Route("question_key", "GET /api/questions/{slug} (10 answers), with a key", "GET"),
        Route("trending", "GET /api/feed/trending", "GET"),
        Route("patterns_search", "GET /api/patterns?search=…", "GET"),
        Route("search_fulltext", "GET /api/search?q=…&use_semantic=false", "GET"),
        Route("upvote", "POST /api/answers/{id}/vote", "POST"),
        Route("create", "POST /api/patterns", "POST"),
        Route("semantic", "GET /api/search?q=… (semantic)", "GET"),
    )
}


# Corpus for the search routes: generated technical texts (benchmarks/corpus.py),
# distinct short queries, and a few words for ?search=.
N_PATTERNS = 150
N_PATTERN_VOTERS = 40
N_ANSWERS = 10
N_VOTERS = 60
N_QUERIES = 64
PATTERN_SEARCHES = ("retry", "cache invalidation", "postgres", "webhook", "rate limit")


def seed(base: str, rounds: int) -> dict[str, Any]:
    """Through Serve: agents, patterns with votes (trending), the question read
    by the detail routes, and a fresh question per (server, round) for the
    upvote runs (every request there is then a change)."""

    def register(name: str) -> dict[str, str]:
        made: dict[str, str] = api_call(base, "POST", "/api/agents/register", body={"name": name})
        return made

    author = register("bench author")
    helpers = [register(f"bench helper {i}")["api_key"] for i in range(N_ANSWERS)]
    voters = [register(f"bench voter {i}")["api_key"] for i in range(N_VOTERS)]
    texts = texts_for(2 * N_PATTERNS)
    patterns = []
    for i in range(N_PATTERNS):
        body = {
            "title": " ".join(texts[2 * i].split()[:8]).rstrip(".,"),
            "description": texts[2 * i],
            "content": texts[2 * i + 1],
            "use_case_tags": ["bench"],
        }
        patterns.append(api_call(base, "POST", "/api/patterns", author["api_key"], body)["id"])
    for v, key in enumerate(voters[:N_PATTERN_VOTERS]):
        for pid in patterns[v % 7 :: 11]:
            api_call(base, "POST", f"/api/patterns/{pid}/vote", key, {"vote_type": "upvote"})

    def question(title: str) -> tuple[str, list[str]]:
        return seed_question(base, author["api_key"], helpers, title, ["http", "retries"])

    detail, detail_answers = question("Retrying rate-limited APIs (the detail read)")
    for i, answer_id in enumerate(detail_answers):
        for key in voters[: i % 5]:
            api_call(base, "POST", f"/api/answers/{answer_id}/vote", key, {"vote_type": "upvote"})
    api_call(base, "POST", f"/api/answers/{detail_answers[3]}/accept", author["api_key"])
    vote_sets = {
        (server, r): question(f"Upvote run {server} {r}")[1]
        for server in ("uvicorn", "Ray Serve")
        for r in range(-1, rounds)  # -1: the warm-up runs
    }
    return {
        "username": author["username"],
        "author_key": author["api_key"],
        "voter": voters[0],
        "voters": voters,
        "detail": detail,
        "vote_sets": vote_sets,
        "queries": queries_for(N_QUERIES),
        "patterns": len(patterns),
    }


PATHS_SCRIPT = """\
local paths = {{{paths}}}
local headers = {{{headers}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1], headers)
end
"""

# A new pattern per request, each with its own text (so its similar-patterns
# lookup embeds a text nobody asked for before).
CREATE_SCRIPT = """\
local key = "{key}"
local tag = "{tag}"
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  n = 0
end
request = function()
  n = n + 1
  local body = string.format(
    '{{"title":"Bench pattern %s %d %d","description":"Retry webhook deliveries %d ' ..
    'with exponential backoff, run %s, thread %d.","content":"Keep a delivery log %d, ' ..
    'back off with jitter and give up after %d attempts.","use_case_tags":["bench"]}}',
    tag, tid, n, n, tag, tid, n, n % 9 + 2)
  return wrk.format("POST", "/api/patterns",
    {{["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}}, body)
end
"""


def route_script(
    tmp: Path, route: Route, facts: dict[str, Any], server: str, run: int
) -> tuple[str, Path]:
    """The first path of a route and the wrk script that drives it."""
    quote = urllib.parse.quote
    headers = ""
    if route.key == "profile":
        paths = [f"/api/agents/{facts['username']}"]
    elif route.key in ("question", "question_key"):
        paths = [f"/api/questions/{facts['detail']}"]
        if route.key == "question_key":
            headers = f'["Authorization"] = "Bearer {facts["voter"]}"'
    elif route.key == "trending":
        paths = ["/api/feed/trending"]
    elif route.key == "patterns_search":
        paths = [f"/api/patterns?search={quote(q)}" for q in PATTERN_SEARCHES]
    elif route.key in ("search_fulltext", "semantic"):
        suffix = "" if route.key == "semantic" else "&use_semantic=false"
        paths = [
            f"/api/search?q={quote(q)}&type=patterns&limit=20{suffix}" for q in facts["queries"]
        ]
    elif route.key == "upvote":
        answers = facts["vote_sets"][(server, run)]
        path = tmp / f"vote-{len(list(tmp.iterdir()))}.lua"
        path.write_text(
            VOTE_SCRIPT.format(
                keys=lua_list(facts["voters"]), answers=lua_list(answers), threads=THREADS
            )
        )
        return f"/api/answers/{answers[0]}/vote", path
    elif route.key == "create":
        tag = f"{server.split()[-1].lower()}{run + 1}"
        path = tmp / f"create-{len(list(tmp.iterdir()))}.lua"
        path.write_text(CREATE_SCRIPT.format(key=facts["author_key"], tag=tag))
        return "/api/patterns", path
    else:
        raise ValueError(route.key)
    path = tmp / f"{route.key}.lua"
    path.write_text(PATHS_SCRIPT.format(paths=lua_list(paths), headers=headers))
    return paths[0], path


def check_routes(base: str, facts: dict[str, Any], semantic: bool) -> None:
    """Each read answers 200 and the way the bench means it (10 answers, the
    caller's votes with a key, semantic or full-text mode)."""
    shown = api_call(base, "GET", f"/api/questions/{facts['detail']}", facts["voter"])
    if len(shown["answers"]) != N_ANSWERS or "user_vote" not in shown["answers"][0]:
        raise RuntimeError(f"{base}: the detail read does not show the seeded answers")
    feed = api_call(base, "GET", "/api/feed/trending")
    if not feed:
        raise RuntimeError(f"{base}: the trending feed is empty")
    query = urllib.parse.quote(facts["queries"][0])
    for mode in ("semantic", "fulltext") if semantic else ("fulltext",):
        flag = "" if mode == "semantic" else "&use_semantic=false"
        status, body = http_json(
            "GET", f"{base}/api/search?q={query}&type=patterns{flag}", None, 60
        )
        if status != 200 or body.get("mode") != mode:
            raise RuntimeError(f"{base}: search answered {status} in {body!r:.200}, not {mode}")
