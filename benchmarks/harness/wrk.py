"""wrk: installed if missing, run, parsed; the options every benchmark takes
and the Lua scripts several share."""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

THREADS = 2  # wrk's threads


@dataclass
class WrkResult:
    requests_per_s: float
    requests: int
    seconds: float
    latency_ms: dict[int, float]  # percentile -> ms
    non_2xx_3xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.non_2xx_3xx + sum(self.socket_errors.values())

    def errors_text(self) -> str:
        if not self.errors:
            return "0"
        parts = []
        if self.non_2xx_3xx:
            parts.append(f"{self.non_2xx_3xx} non-2xx/3xx")
        parts += [f"{n} {kind}" for kind, n in self.socket_errors.items() if n]
        return ", ".join(parts)


def ensure_apt(binary: str, package: str) -> str:
    """``binary``, installed with apt-get (Debian's ``package``) if missing."""
    found = shutil.which(binary)
    if found:
        return found
    print(f"bench: {binary} not found; installing it: apt-get install -y {package}", flush=True)
    apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(apt, check=False).returncode != 0:
        print("bench: install failed; running apt-get update first", flush=True)
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(apt, check=True)
    found = shutil.which(binary)
    if not found:
        raise SystemExit(f"bench: {binary} is still not on PATH after apt-get install")
    print(f"bench: installed {found}", flush=True)
    return found


def ensure_wrk() -> str:
    return ensure_apt("wrk", "wrk")


def wrk_version(wrk: str) -> str:
    out = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    text = (out.stdout + out.stderr).strip().splitlines()
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer" -> "wrk debian/4.1.0-3+b2"
    return " ".join(text[0].split()[:2]) if text else "wrk"


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def parse_wrk(output: str) -> WrkResult:
    """Parse the text wrk prints with ``--latency``."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)\s*$", output, re.M)
    total = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", output, re.M)
    if not rps or not total:
        raise ValueError(f"could not parse wrk output:\n{output}")
    dist = output.split("Latency Distribution", 1)[1] if "Latency Distribution" in output else ""
    found = re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s|m|h)\s*$", dist, re.M)
    latency = {int(pct): float(value) * _UNITS_MS[unit] for pct, value, unit in found}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sock = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    kinds = ("connect", "read", "write", "timeout")
    socket_errors = dict(zip(kinds, map(int, sock.groups()), strict=True)) if sock else {}
    seconds = float(total.group(2)) * _UNITS_MS[total.group(3)] / 1000.0
    non_2xx_3xx = int(non2xx.group(1)) if non2xx else 0
    return WrkResult(
        float(rps.group(1)), int(total.group(1)), seconds, latency, non_2xx_3xx, socket_errors
    )


def run_wrk(
    wrk: str, url: str, *, duration: int, connections: int, script: Path | None, timeout_s: int = 0
) -> tuple[WrkResult, str]:
    """``timeout_s``: wrk's request timeout (0: wrk's default, 2 s, which counts
    a slower answer as an error)."""
    # wrk needs a connection per thread: one connection, one thread.
    cmd = [wrk, f"-t{min(THREADS, connections)}", f"-c{connections}", f"-d{duration}s", "--latency"]
    if timeout_s:
        cmd += ["--timeout", f"{timeout_s}s"]
    if script is not None:
        cmd += ["-s", str(script)]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return parse_wrk(out.stdout), out.stdout


def measure_url(
    wrk: str,
    label: str,
    url: str,
    args: argparse.Namespace,
    script: Path | None = None,
    warmup: int | None = None,
) -> WrkResult:
    """A warm-up run, then the measured one, with the run's options
    (``wrk_options``; ``warmup`` instead of its ``--warmup``); prints a line."""
    go = functools.partial(run_wrk, wrk, url, connections=args.connections, script=script)
    if warm := args.warmup if warmup is None else warmup:
        go(duration=warm)
    result, raw = go(duration=args.duration)
    print_run(label, result, raw)
    return result


def print_run(label: str, result: WrkResult, raw: str, extra: str = "") -> None:
    """A line on a wrk run (and wrk's own output when there were errors)."""
    print(
        f"bench: {label:<50} {result.requests_per_s:>9.1f} req/s  "
        f"p50 {result.latency_ms.get(50, float('nan')):.2f} ms  "
        f"p99 {result.latency_ms.get(99, float('nan')):.2f} ms  "
        f"errors {result.errors_text()}{extra}",
        flush=True,
    )
    if result.errors:
        print(raw, flush=True)


def wrk_options(bench: str, *, duration: int = 15) -> argparse.ArgumentParser:
    """A benchmark's parser (``python -m benchmarks.<bench>``) with the options
    every benchmark takes: wrk's run and whether to write the docs."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{bench}")
    add = parser.add_argument
    add("--duration", type=int, default=duration, help=f"seconds per route ({duration})")
    add("--warmup", type=int, default=3, help="warm-up seconds per route (3)")
    add("--connections", type=int, default=16, help="wrk connections (16)")
    add("--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone")
    return parser


def wrk_run(wrk_ver: str, args: argparse.Namespace) -> str:
    """How wrk ran (its version, threads, connections, duration, warm-up), for a section."""
    run = f"`-t{THREADS} -c{args.connections} -d{args.duration}s --latency`"
    return f"{wrk_ver}, {run} after a {args.warmup} s warm-up"


def lua_list(items: list[str]) -> str:
    """Strings as the items of a Lua table."""
    return ", ".join(json.dumps(x) for x in items)


def paths_script(path: Path, paths: list[str], headers: str = "") -> Path:
    """A wrk script at ``path`` that asks ``paths`` in turn (with ``headers``, Lua table items)."""
    path.write_text(PATHS_SCRIPT.format(paths=lua_list(paths), headers=headers))
    return path


def key_script(path: Path, key: str) -> Path:
    """A wrk script at ``path`` that sends ``key`` on every request."""
    path.write_text(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
    return path


def vote_script(path: Path, keys: list[str], answers: list[str]) -> Path:
    """VOTE_SCRIPT at ``path`` for these voters' keys and answers."""
    path.write_text(
        VOTE_SCRIPT.format(keys=lua_list(keys), answers=lua_list(answers), threads=THREADS)
    )
    return path


PATHS_SCRIPT = """\
local paths = {{{paths}}}
local headers = {{{headers}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1], headers)
end
"""


# Each wrk thread takes every THREADS-th (voter, answer) pair, answers varying
# fastest; a pass upvotes every pair, the next downvotes it, and so on: every
# request changes a vote (a new vote, then a switch), on answers nobody else
# votes on in this run.
VOTE_SCRIPT = """\
local keys = {{{keys}}}
local answers = {{{answers}}}
local nthreads = {threads}
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  n = 0
end
request = function()
  local k = n * nthreads + tid
  n = n + 1
  local pairs = #keys * #answers
  local j = k % pairs
  local cycle = math.floor(k / pairs)
  local answer = answers[(j % #answers) + 1]
  local key = keys[(math.floor(j / #answers) % #keys) + 1]
  local vote = (cycle % 2 == 0) and "upvote" or "downvote"
  return wrk.format("POST", "/api/answers/" .. answer .. "/vote",
    {{["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}},
    '{{"vote_type":"' .. vote .. '"}}')
end
"""
