"""What every benchmark shares: its service, wrk, and its docs section.

* The service (``service.py``): ``cairn run`` (or any server command) as a
  subprocess with its output in a log file (``Server``), for a block
  (``serve_running``) on a fresh state folder (``fresh_serve_run``), and
  whatever a killed server left behind in that folder stopped
  (``leftover_processes``, ``stop_bench_processes``); its environment
  (``server_env``) and JSON calls to it (``http_json``, ``api_call``,
  ``register``).
* wrk (``wrk.py``): installed if missing (``ensure_wrk``), run and parsed
  (``run_wrk``, ``parse_wrk``, ``WrkResult``, ``measure_url``), the options
  every benchmark takes (``wrk_options``) and the Lua scripts several share.
* The results (``results.py``): a section of docs/benchmarks.md between a
  benchmark's marks (``write_docs``), its first lines (``section_head``,
  ``machine_line``), a table of routes (``serve_table``), percentiles
  (``pct``) and this process's memory (``rss_mib``).

A benchmark imports these names from ``benchmarks.harness``.
"""

from benchmarks.harness.results import (
    DOCS,
    ROOT,
    cpu_model,
    machine_line,
    pct,
    rss_mib,
    section_head,
    serve_table,
    write_docs,
)
from benchmarks.harness.service import (
    DROPPED_ENV,
    HOST,
    OPERATOR,
    OPERATOR_TOKEN,
    RATE_LIMIT,
    SERVE_START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    Server,
    api_call,
    bench_processes,
    fresh_serve_run,
    http_json,
    leftover_processes,
    port_in_use,
    register,
    serve_running,
    server_env,
    stop_bench_processes,
    stop_on_sigterm,
)
from benchmarks.harness.wrk import (
    KEY_SCRIPT,
    THREADS,
    VOTE_SCRIPT,
    WrkResult,
    ensure_wrk,
    lua_list,
    measure_url,
    parse_wrk,
    run_wrk,
    wrk_options,
    wrk_version,
)

__all__ = [
    "DOCS",
    "DROPPED_ENV",
    "HOST",
    "KEY_SCRIPT",
    "OPERATOR",
    "OPERATOR_TOKEN",
    "RATE_LIMIT",
    "ROOT",
    "SERVE_START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "THREADS",
    "VOTE_SCRIPT",
    "Server",
    "WrkResult",
    "api_call",
    "bench_processes",
    "cpu_model",
    "ensure_wrk",
    "fresh_serve_run",
    "http_json",
    "leftover_processes",
    "lua_list",
    "machine_line",
    "measure_url",
    "parse_wrk",
    "pct",
    "port_in_use",
    "register",
    "rss_mib",
    "run_wrk",
    "section_head",
    "serve_running",
    "serve_table",
    "server_env",
    "stop_bench_processes",
    "stop_on_sigterm",
    "write_docs",
    "wrk_options",
    "wrk_version",
]
