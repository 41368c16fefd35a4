"""What every benchmark shares: its service, wrk, and its docs section.

* The service (``service.py``): its settings (``bench_env``, ``server_env``),
  ``cairn run`` (or any server command) as a subprocess with its output in a
  log file (``Server``), for a block (``serve_running``) on a fresh state
  folder (``fresh_state``, ``fresh_serve_run``) or one this process prepared
  (``prepare_here``), what a killed server left behind stopped
  (``leftover_processes``, ``stop_bench_processes``), calls to it
  (``http_json``, ``api_call``, ``register``) and an authenticated read timed
  under load (``probe``).
* wrk (``wrk.py``): installed if missing (``ensure_wrk``), run and parsed
  (``run_wrk``, ``WrkResult``, ``measure_url``), the options every benchmark
  takes (``wrk_options``) and the Lua scripts several share.
* The results (``results.py``): a section of docs/benchmarks.md between a
  benchmark's marks (``publish``, ``write_docs``), its first lines
  (``section_head``), a table of routes (``serve_table``), percentiles
  (``pct``) and this process's memory (``rss_mib``).

A benchmark imports these names from ``benchmarks.harness``.
"""

from benchmarks.harness.results import (
    DOCS,
    ROOT,
    machine_line,
    pct,
    publish,
    rss_mib,
    section_head,
    serve_table,
    write_docs,
)
from benchmarks.harness.service import (
    DROPPED_ENV,
    HOST,
    OPERATOR,
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
    leftover_processes,
    new_agent,
    port_in_use,
    ports_free,
    prepare_here,
    probe,
    register,
    serve_running,
    server_env,
    setting_ports,
    stop_bench_processes,
    stop_on_sigterm,
    stop_servers,
)
from benchmarks.harness.wrk import (
    KEY_SCRIPT,
    THREADS,
    WrkResult,
    ensure_wrk,
    lua_list,
    measure_url,
    paths_script,
    print_run,
    run_wrk,
    vote_script,
    wrk_options,
    wrk_version,
)
