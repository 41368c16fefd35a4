"""The HTTP benchmark's tables: Serve against uvicorn (and uvicorn+Redis)
round by round, CPU per request by process, py-spy's split, HAProxy's
timers, every run."""

from __future__ import annotations

import statistics

from benchmarks.profile_split import SERVE_ONLY
from benchmarks.serving.measure import Run, fmt_ms
from benchmarks.serving.routes import ROUTES


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _row(key: str, cells: list[float], spec: str) -> str:
    """A route's row: its label, then ``cells`` formatted with ``spec``."""
    return f"| `{ROUTES[key].label}` | " + " | ".join(format(c, spec) for c in cells) + " |"


def versus_table(runs: list[Run], other: str) -> list[str]:
    """Serve's req/s over ``other``'s, round by round (each round measures
    both back to back), and the CPU each spends per request. Against plain
    uvicorn (the headline) also the CPU ratio; against uvicorn+Redis the
    Redis server's CPU is counted."""
    by = {(r.route.key, r.server, r.round): r for r in runs}
    plain = other == "uvicorn"
    rows = [
        f"| Route | {other} req/s | Serve req/s | Serve / {other}, each round | median "
        f"| CPU ms/request {other}{'' if plain else ' (Redis included)'} | Serve |"
        + (" uvicorn / Serve CPU |" if plain else ""),
        "|---|---:|---:|---|---:|---:|---:|" + ("---:|" if plain else ""),
    ]
    for key in dict.fromkeys(r.route.key for r in runs):
        both = [
            (by[(key, other, rnd)], by[(key, "Ray Serve", rnd)])
            for rnd in sorted({r.round for r in runs})
            if (key, other, rnd) in by and (key, "Ray Serve", rnd) in by
        ]
        if not both:
            continue
        ratios = [s.result.requests_per_s / max(o.result.requests_per_s, 1e-9) for o, s in both]
        cpu_o = _median([o.cpu_ms_per_request for o, _ in both])
        cpu_s = _median([s.cpu_ms_per_request for _, s in both])
        rows.append(
            f"| `{ROUTES[key].label}` | {_median([o.result.requests_per_s for o, _ in both]):,.0f} "
            f"| {_median([s.result.requests_per_s for _, s in both]):,.0f} "
            f"| {', '.join(f'{x:.2f}' for x in ratios)} | **{_median(ratios):.2f}x** "
            f"| {cpu_o:.2f} | {cpu_s:.2f} |" + (f" {cpu_o / cpu_s:.2f}x |" if plain else "")
        )
    return rows


def per_request_ms(r: Run, kinds: tuple[str, ...] | None = None) -> float:
    """CPU ms per request of a run's processes (those of ``kinds``, or all)."""
    cpu = r.cpu_s if kinds is None else {k: r.cpu_s.get(k, 0.0) for k in kinds}
    return 1000 * sum(cpu.values()) / max(1, r.result.requests)


def split_table(runs: list[Run], split: str, parts: tuple[str, ...]) -> list[str]:
    """With --profile: the app processes' CPU per request split by ``parts``
    (``split``: a run's ``profile``, py-spy's components, or its
    ``admission``, the steps of admission), as shares of the processes'
    measured CPU time; ms per request, median over rounds. A request from a
    new address or a new agent takes admission's cold path (the mixes' rows)."""
    rows = [
        "| Route | Server | app CPU ms/request | " + " | ".join(parts) + " |",
        "|---|---|---:|" + "---:|" * len(parts),
    ]
    for key in ROUTES:
        for server in ("uvicorn", "uvicorn+Redis", "Ray Serve"):
            mine = [
                r for r in runs if (r.route.key, r.server) == (key, server) and getattr(r, split)
            ]
            if not mine:
                continue
            app = ("Api replicas",) if server == "Ray Serve" else ("uvicorn workers",)
            ms = _median([per_request_ms(r, app) for r in mine])
            shares = [_median([getattr(r, split).get(c, 0.0) for r in mine]) for c in parts]
            cells = " | ".join(f"{ms * s:.3f}" for s in shares)
            rows.append(f"| `{ROUTES[key].label}` | {server} | {ms:.2f} | {cells} |")
    return rows


# Processes that run only under Serve, on Cairn's behalf (its actors).
SERVE_ONLY_PROCESSES = ("RateLimiterShard actor", "TrendingActor actor", "DispatchActor actor")
SERVE_ONLY_TARGET = 0.05  # issue 46: at most 5% of a request's CPU


def serve_only_table(runs: list[Run]) -> list[str]:
    """With --profile, under Serve: what Cairn runs only there (py-spy's
    ``SERVE_ONLY`` share of the Api replicas' CPU, and its actors' processes)
    against the CPU of the whole request (every process the meter counts)."""
    rows = [
        "| Route | request CPU ms (all processes) | in the Api replicas ms | in Cairn's actors "
        "ms | Cairn under Serve only ms | share | within 5% |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key in ROUTES:
        mine = [r for r in runs if r.route.key == key and r.server == "Ray Serve" and r.profile]
        if not mine:
            continue
        total = _median([per_request_ms(r) for r in mine])
        app = _median(
            [
                per_request_ms(r, ("Api replicas",)) * (r.profile or {}).get(SERVE_ONLY, 0.0)
                for r in mine
            ]
        )
        actors = _median([per_request_ms(r, SERVE_ONLY_PROCESSES) for r in mine])
        share = (app + actors) / total if total else float("nan")
        rows.append(
            f"| `{ROUTES[key].label}` | {total:.2f} | {app:.3f} | {actors:.3f} | "
            f"{app + actors:.3f} | {share:.1%} | {'yes' if share <= SERVE_ONLY_TARGET else 'no'} |"
        )
    return rows


def latency_table(runs: list[Run]) -> list[str]:
    rows = [
        "| Route | Server | round | req/s | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(runs, key=lambda r: (list(ROUTES).index(r.route.key), r.round, r.server)):
        w = r.result
        rows.append(
            f"| `{r.route.label}` | {r.server} | {r.round + 1} | {w.requests_per_s:,.0f} | "
            f"{fmt_ms(w, 50)} | {fmt_ms(w, 90)} | {fmt_ms(w, 99)} | {w.errors_text()} |"
        )
    return rows


def cpu_table(runs: list[Run]) -> list[str]:
    """Serve's CPU per request by process, median over rounds."""
    serve = [r for r in runs if r.server == "Ray Serve"]
    used = {k for r in serve for k in r.cpu_s}
    kinds = sorted(used, key=lambda k: -sum(r.cpu_s.get(k, 0) for r in serve))
    rows = ["| Route | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for key in ROUTES:
        if mine := [r for r in serve if r.route.key == key]:
            cells = [_median([per_request_ms(r, (k,)) for r in mine]) for k in kinds]
            rows.append(_row(key, cells, ".3f"))
    return rows


def haproxy_table(runs: list[Run]) -> list[str]:
    rows = [
        "| Route | HAProxy queue ms | connect ms | response ms (replica) | total ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ROUTES:
        mine = [r.haproxy for r in runs if r.route.key == key and r.haproxy]
        if mine:
            cells = [_median([m[k] for m in mine]) for k in ("qtime", "ctime", "rtime", "ttime")]
            rows.append(_row(key, cells, ".0f"))
    return rows
