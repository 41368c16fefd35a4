"""The HTTP benchmark's tables: Serve against uvicorn round by round, CPU
per request by process, py-spy's split, HAProxy's timers, every run."""

from __future__ import annotations

import statistics

from benchmarks.profile_split import ADMISSION_PARTS, COMPONENTS, SERVE_ONLY
from benchmarks.serving.measure import Run, fmt_ms
from benchmarks.serving.routes import ROUTES


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pairs(runs: list[Run]) -> dict[str, list[tuple[Run, Run]]]:
    """Per route key, the (uvicorn, Serve) runs of each round."""
    by = {(r.route.key, r.server, r.round): r for r in runs}
    out: dict[str, list[tuple[Run, Run]]] = {}
    for (key, server, rnd), run in sorted(by.items(), key=lambda kv: kv[0][2]):
        if server != "uvicorn" or (key, "Ray Serve", rnd) not in by:
            continue
        out.setdefault(key, []).append((run, by[(key, "Ray Serve", rnd)]))
    return out


def ratio_table(runs: list[Run]) -> list[str]:
    """The headline: Serve's req/s over uvicorn's, round by round (each round
    measures both back to back), and the CPU each spends per request."""
    rows = [
        "| Route | uvicorn req/s | Serve req/s | Serve / uvicorn, each round | "
        "median | CPU ms/request uvicorn | Serve | uvicorn / Serve CPU |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for key, both in pairs(runs).items():
        ratios = [s.result.requests_per_s / max(u.result.requests_per_s, 1e-9) for u, s in both]
        cpu_u = _median([u.cpu_ms_per_request for u, _ in both])
        cpu_s = _median([s.cpu_ms_per_request for _, s in both])
        rows.append(
            f"| `{ROUTES[key].label}` | {_median([u.result.requests_per_s for u, _ in both]):,.0f} "
            f"| {_median([s.result.requests_per_s for _, s in both]):,.0f} "
            f"| {', '.join(f'{x:.2f}' for x in ratios)} | **{_median(ratios):.2f}x** "
            f"| {cpu_u:.2f} | {cpu_s:.2f} | {cpu_u / cpu_s:.2f}x |"
        )
    return rows


SERVERS = ("uvicorn", "uvicorn+Redis", "Ray Serve")


def redis_table(runs: list[Run]) -> list[str]:
    """Serve against uvicorn with one global limit in Redis (both enforce a
    limit shared by every worker), round by round."""
    by = {(r.route.key, r.server, r.round): r for r in runs}
    rows = [
        "| Route | uvicorn+Redis req/s | Serve req/s | Serve / uvicorn+Redis, each round | "
        "median | CPU ms/request uvicorn+Redis (Redis included) | Serve |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for key in ROUTES:
        both = [
            (by[(key, "uvicorn+Redis", rnd)], by[(key, "Ray Serve", rnd)])
            for (k, server, rnd) in sorted(by, key=lambda t: t[2])
            if k == key and server == "uvicorn+Redis" and (key, "Ray Serve", rnd) in by
        ]
        if not both:
            continue
        ratios = [s.result.requests_per_s / max(u.result.requests_per_s, 1e-9) for u, s in both]
        rows.append(
            f"| `{ROUTES[key].label}` | {_median([u.result.requests_per_s for u, _ in both]):,.0f} "
            f"| {_median([s.result.requests_per_s for _, s in both]):,.0f} "
            f"| {', '.join(f'{x:.2f}' for x in ratios)} | **{_median(ratios):.2f}x** "
            f"| {_median([u.cpu_ms_per_request for u, _ in both]):.2f} "
            f"| {_median([s.cpu_ms_per_request for _, s in both]):.2f} |"
        )
    return rows


def admission_table(runs: list[Run]) -> list[str]:
    """With --profile: what admission costs in the app processes, by step
    (ms of CPU per request, median over rounds): the cold path of a request
    from a new address or a new agent is in the mixes' rows."""
    rows = [
        "| Route | Server | app CPU ms/request | " + " | ".join(ADMISSION_PARTS) + " |",
        "|---|---|---:|" + "---:|" * len(ADMISSION_PARTS),
    ]
    for key in ROUTES:
        for server in SERVERS:
            mine = [r for r in runs if r.route.key == key and r.server == server and r.admission]
            if not mine:
                continue
            app = "Api replicas" if server == "Ray Serve" else "uvicorn workers"
            ms = _median([1000 * r.cpu_s.get(app, 0.0) / max(1, r.result.requests) for r in mine])
            shares = [
                _median([(r.admission or {}).get(c, 0.0) for r in mine]) for c in ADMISSION_PARTS
            ]
            rows.append(
                f"| `{ROUTES[key].label}` | {server} | {ms:.2f} | "
                + " | ".join(f"{ms * s:.3f}" for s in shares)
                + " |"
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
    kinds = sorted(
        {k for r in serve for k in r.cpu_s}, key=lambda k: -sum(r.cpu_s.get(k, 0) for r in serve)
    )
    rows = [
        "| Route | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for key in ROUTES:
        mine = [r for r in serve if r.route.key == key]
        if not mine:
            continue
        cells = [
            _median([1000 * r.cpu_s.get(k, 0.0) / max(1, r.result.requests) for r in mine])
            for k in kinds
        ]
        rows.append(f"| `{ROUTES[key].label}` | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return rows


def profile_table(runs: list[Run]) -> list[str]:
    """With --profile: the app processes' CPU per request split by component
    (py-spy's samples as shares of the processes' measured CPU time)."""

    rows = [
        "| Route | Server | app CPU ms/request | " + " | ".join(COMPONENTS) + " |",
        "|---|---|---:|" + "---:|" * len(COMPONENTS),
    ]
    for key in ROUTES:
        for server in SERVERS:
            mine = [r for r in runs if r.route.key == key and r.server == server and r.profile]
            if not mine:
                continue
            app = "Api replicas" if server == "Ray Serve" else "uvicorn workers"
            ms = _median([1000 * r.cpu_s.get(app, 0.0) / max(1, r.result.requests) for r in mine])
            shares = [_median([(r.profile or {}).get(c, 0.0) for r in mine]) for c in COMPONENTS]
            rows.append(
                f"| `{ROUTES[key].label}` | {server} | {ms:.2f} | "
                + " | ".join(f"{ms * s:.3f}" for s in shares)
                + " |"
            )
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

        def per_request(r: Run, names: tuple[str, ...] | None = None) -> float:
            kept = r.cpu_s if names is None else {n: r.cpu_s.get(n, 0.0) for n in names}
            return 1000 * sum(kept.values()) / max(1, r.result.requests)

        total = _median([per_request(r) for r in mine])
        app = _median(
            [
                per_request(r, ("Api replicas",)) * (r.profile or {}).get(SERVE_ONLY, 0.0)
                for r in mine
            ]
        )
        actors = _median([per_request(r, SERVE_ONLY_PROCESSES) for r in mine])
        share = (app + actors) / total if total else float("nan")
        rows.append(
            f"| `{ROUTES[key].label}` | {total:.2f} | {app:.3f} | {actors:.3f} | "
            f"{app + actors:.3f} | {share:.1%} | {'yes' if share <= SERVE_ONLY_TARGET else 'no'} |"
        )
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
            rows.append(
                f"| `{ROUTES[key].label}` | " + " | ".join(f"{c:.0f}" for c in cells) + " |"
            )
    return rows
