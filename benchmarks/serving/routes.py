"""The HTTP benchmark's routes: what it seeds through Serve, the wrk script
that drives each route, and the check that each answers as meant."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.corpus import queries_for, seed_question, texts_for
from benchmarks.harness import api_call, http_json, lua_list, new_agent, paths_script, vote_script


@dataclass(frozen=True)
class Route:
    key: str
    label: str
    mix: str = "one"  # which clients send it: MIXES

    @property
    def base(self) -> str:
        """The route's key without its client mix."""
        return self.key.split("@", 1)[0]


ROUTES = {
    r.key: r
    for r in (
        Route("profile", "GET /api/agents/{username}"),
        Route("question", "GET /api/questions/{slug} (10 answers)"),
        Route("question_key", "GET /api/questions/{slug} (10 answers), with a key"),
        Route("trending", "GET /api/feed/trending"),
        Route("patterns_search", "GET /api/patterns?search=…"),
        Route("search_fulltext", "GET /api/search?q=…&use_semantic=false"),
        Route("upvote", "POST /api/answers/{id}/vote"),
        Route("create", "POST /api/patterns"),
        Route("semantic", "GET /api/search?q=… (semantic)"),
    )
}


# Who sends the requests (``--mixes``): every request from the bench's one
# address; each from a new address (a random X-Forwarded-For, trusted from
# 127.0.0.1 by CAIRN_TRUSTED_PROXIES); or each with one of N_KEYS agents' keys,
# in turn, so each agent calls a few times per run.
MIXES = {"one": "one address", "ips": "a new address per request", "keys": "many agent keys"}
# The reads measured with every mix (the routes of the previous issue).
MIXED_ROUTES = ("profile", "question", "trending", "patterns_search", "search_fulltext")
N_KEYS = 2000
# Disjoint slices of the agents: (rounds + 1) x servers x (warm-up, run), at
# three rounds; more rounds reuse them (an agent then calls again minutes later).
CROWD_SLICES = 24


def mixed(route: Route, mix: str) -> Route:
    """``route`` sent by the clients of ``mix`` (registered in ROUTES)."""
    if mix == "one":
        return route
    made = Route(f"{route.key}@{mix}", f"{route.label} [{MIXES[mix]}]", mix)
    ROUTES[made.key] = made
    return made


# Corpus for the search routes: generated technical texts (benchmarks/corpus.py),
# distinct short queries, and a few words for ?search=.
N_PATTERNS = 150
N_PATTERN_VOTERS = 40
N_ANSWERS = 10
N_VOTERS = 60
N_QUERIES = 64
PATTERN_SEARCHES = ("retry", "cache invalidation", "postgres", "webhook", "rate limit")


def register_many(base: str, n: int) -> list[str]:
    """The keys of ``n`` new agents (a few registrations at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = pool.map(lambda i: new_agent(base, f"bench crowd {i}"), range(n))
        return [agent["api_key"] for agent in made]


def seed(base: str, rounds: int, n_keys: int = 0) -> dict[str, Any]:
    """Through Serve: agents, patterns with votes (trending), the question read
    by the detail routes, and a fresh question per (server, round) for the
    upvote runs (every request there is then a change)."""
    author = new_agent(base, "bench author")
    helpers = [new_agent(base, f"bench helper {i}")["api_key"] for i in range(N_ANSWERS)]
    voters = [new_agent(base, f"bench voter {i}")["api_key"] for i in range(N_VOTERS)]
    texts = texts_for(2 * N_PATTERNS)
    patterns = [
        api_call(base, "POST", "/api/patterns", author["api_key"], {
            "title": " ".join(texts[2 * i].split()[:8]).rstrip(".,"),
            "description": texts[2 * i],
            "content": texts[2 * i + 1],
            "use_case_tags": ["bench"],
        })["id"]
        for i in range(N_PATTERNS)
    ]  # fmt: skip
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
        for server in ("uvicorn", "uvicorn+Redis", "Ray Serve")
        for r in range(-1, rounds)  # -1: the warm-up runs
    }
    return {
        "username": author["username"], "author_key": author["api_key"], "voter": voters[0],
        "voters": voters, "detail": detail, "vote_sets": vote_sets, "patterns": len(patterns),
        "queries": queries_for(N_QUERIES), "crowd": register_many(base, n_keys) if n_keys else [],
    }  # fmt: skip


# The many-clients mixes: a random client address (X-Forwarded-For) or the
# next of many agent keys on each request, over the route's paths.
MIX_SCRIPT = """\
local paths = {{{paths}}}
local keys = {{{keys}}}
local mix = "{mix}"
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  math.randomseed(os.time() + 7919 * tid)
  i = tid * 104729
end
request = function()
  i = i + 1
  local headers = {{}}
  if mix == "ips" then
    headers["X-Forwarded-For"] = string.format("%d.%d.%d.%d",
      math.random(1, 223), math.random(0, 255), math.random(0, 255), math.random(1, 254))
  elseif mix == "keys" then
    headers["Authorization"] = "Bearer " .. keys[(i % #keys) + 1]
  end
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


def crowd_slice(crowd: list[str], server: str, run: int, warmup: bool) -> list[str]:
    """The agents of one run of the many-keys mix: a slice of its own for each
    (server, round, warm-up or measured run), so every run meets agents calling
    for the first time that minute (a write), never ones another run just warmed."""
    servers = ("uvicorn", "uvicorn+Redis", "Ray Serve")
    slot = (run + 1) * 2 * len(servers) + 2 * servers.index(server) + (0 if warmup else 1)
    size = max(1, len(crowd) // CROWD_SLICES)
    start = (slot * size) % max(1, len(crowd))
    return crowd[start : start + size] or crowd


def route_script(
    tmp: Path, route: Route, facts: dict[str, Any], server: str, run: int, warmup: bool = False
) -> tuple[str, Path]:
    """The first path of a route and the wrk script that drives it."""
    quote, headers, key = urllib.parse.quote, "", route.base
    if key == "profile":
        paths = [f"/api/agents/{facts['username']}"]
    elif key in ("question", "question_key"):
        paths = [f"/api/questions/{facts['detail']}"]
        if key == "question_key":
            headers = f'["Authorization"] = "Bearer {facts["voter"]}"'
    elif key == "trending":
        paths = ["/api/feed/trending"]
    elif key == "patterns_search":
        paths = [f"/api/patterns?search={quote(q)}" for q in PATTERN_SEARCHES]
    elif key in ("search_fulltext", "semantic"):
        suffix = "" if key == "semantic" else "&use_semantic=false"
        paths = [
            f"/api/search?q={quote(q)}&type=patterns&limit=20{suffix}" for q in facts["queries"]
        ]
    elif key == "upvote":
        answers = facts["vote_sets"][(server, run)]
        path = vote_script(tmp / f"vote-{len(list(tmp.iterdir()))}.lua", facts["voters"], answers)
        return f"/api/answers/{answers[0]}/vote", path
    elif key == "create":
        tag = f"{server.split()[-1].lower()}{run + 1}"
        path = tmp / f"create-{len(list(tmp.iterdir()))}.lua"
        path.write_text(CREATE_SCRIPT.format(key=facts["author_key"], tag=tag))
        return "/api/patterns", path
    else:
        raise ValueError(route.key)
    path = tmp / f"{route.key.replace('@', '-')}-{len(list(tmp.iterdir()))}.lua"
    if route.mix != "one":
        crowd = crowd_slice(facts["crowd"], server, run, warmup) if route.mix == "keys" else []
        path.write_text(
            MIX_SCRIPT.format(paths=lua_list(paths), keys=lua_list(crowd), mix=route.mix)
        )
    else:
        paths_script(path, paths, headers)
    return paths[0], path


def check_routes(base: str, facts: dict[str, Any], semantic: bool) -> None:
    """Each read answers 200 and the way the bench means it (10 answers, the
    caller's votes with a key, semantic or full-text mode)."""
    shown = api_call(base, "GET", f"/api/questions/{facts['detail']}", facts["voter"])
    if len(shown["answers"]) != N_ANSWERS or "user_vote" not in shown["answers"][0]:
        raise RuntimeError(f"{base}: the detail read does not show the seeded answers")
    if not api_call(base, "GET", "/api/feed/trending"):
        raise RuntimeError(f"{base}: the trending feed is empty")
    query = urllib.parse.quote(facts["queries"][0])
    for mode in ("semantic", "fulltext") if semantic else ("fulltext",):
        flag = "" if mode == "semantic" else "&use_semantic=false"
        status, body = http_json(
            "GET", f"{base}/api/search?q={query}&type=patterns{flag}", None, 60
        )
        if status != 200 or body.get("mode") != mode:
            raise RuntimeError(f"{base}: search answered {status} in {body!r:.200}, not {mode}")
