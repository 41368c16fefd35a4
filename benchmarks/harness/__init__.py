"""What every benchmark shares: its service (``service.py``: settings, ``cairn
run`` or another server as a subprocess, calls to it, the authenticated probe,
what a run left behind), wrk (``wrk.py``: installed, run, parsed, the common
options and Lua scripts) and its results (``results.py``: the section of
docs/benchmarks.md between its marks, tables, percentiles). A benchmark
imports these names from ``benchmarks.harness``."""

from benchmarks.harness.results import (
    ROOT,
    pct,
    publish,
    rss_mib,
    section_head,
    serve_table,
    write_docs,
)
from benchmarks.harness.service import (
    HOST,
    PROBE_CONCURRENCY,
    PROBES,
    RATE_LIMIT,
    Server,
    api_call,
    bearer,
    bench_env,
    bench_processes,
    fresh_serve_run,
    fresh_state,
    health,
    http_json,
    new_agent,
    ports_free,
    prepare_here,
    probe,
    register,
    serve_running,
    server_env,
    setting_ports,
    stop_on_sigterm,
    stop_servers,
)
from benchmarks.harness.wrk import (
    THREADS,
    WrkResult,
    ensure_apt,
    ensure_wrk,
    key_script,
    lua_list,
    measure_url,
    paths_script,
    print_run,
    run_wrk,
    vote_script,
    wrk_options,
    wrk_version,
)
