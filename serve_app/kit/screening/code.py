"""Risky code: published, with labels a reading agent can act on.

Each rule matches folded code (normalize.py, ``code=True``: lower case,
string concatenations joined, continuation lines joined) and names one of the
documented kinds. ``rm -rf ./build`` is not destructive; ``rm -rf /`` is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from serve_app.kit.screening.normalize import AnchorSet, merge_spans

LABEL_KINDS = (
    "pipe_to_shell",
    "encoded_exec",
    "reverse_shell",
    "destructive_command",
    "tls_verification_disabled",
    "credential_exfiltration",
)

_FETCH = r"(?:curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod|http(?:ie)?|aria2c|lwp-request)"
_SHELL = r"(?:(?:/usr)?(?:/bin/)?(?:ba|z|da|k|c|tc|fi|a)?sh|python[0-9.]*|perl|ruby|node|php|iex|invoke-expression|pwsh|powershell|source)"
_DECODE = (
    r"(?:atob|base64_decode|b64decode|base64\.decode|decodebase64|buffer\.from\([^)]{0,200},\s*['\"](?:base64|hex)|"
    r"bytes\.fromhex|unhexlify|codecs\.decode|frombase64string|gzinflate|str_rot13|zlib\.decompress|"
    r"marshal\.loads|fromcharcode)"
)

RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = (  # (kind, rule, regex)
    (
        "pipe_to_shell",
        "fetch_pipe_shell",
        re.compile(
            r"\b"
            + _FETCH
            + r"\b[^|\n;]{0,300}\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+\S+\s+)?"
            + _SHELL
            + r"\b"
        ),
    ),
    (
        "pipe_to_shell",
        "shell_of_fetch",
        re.compile(
            _SHELL + r"\s+(?:-\S+\s+)*(?:<\s*)?[<(\"']*\s*\$?\(\s*" + _FETCH + r"\b"
            r"|\beval\s+[\"']?\$\(\s*" + _FETCH + r"\b"
            r"|\b(?:iex|invoke-expression)\b[^\n]{0,80}(?:downloadstring|downloadfile|invoke-webrequest|irm|iwr)\b"
            r"|(?:downloadstring|invoke-restmethod|irm|iwr)\b[^\n|]{0,200}\|\s*(?:iex|invoke-expression)\b"
            r"|\bexec\s*\(\s*(?:urllib\.request\.)?urlopen\(|\bexec\s*\(\s*requests\.get\("
        ),
    ),
    (
        "encoded_exec",
        "decode_pipe_shell",
        re.compile(
            r"\b(?:base64\s+(?:-d|--decode|-D)\b|xxd\s+-r|openssl\s+(?:enc\s+)?(?:-)?base64\s+-d|"
            r"certutil\s+-decode|rev\b)[^\n;]{0,200}\|\s*(?:sudo\s+)?" + _SHELL + r"\b"
        ),
    ),
    (
        "encoded_exec",
        "eval_decoded",
        re.compile(
            r"\b(?:eval|exec|execfile|system|popen|spawn|execsync|function|assert|os\.system|"
            r"subprocess\.\w+|invoke-expression|iex|runtime\.getruntime\(\)\.exec)\s*\(\s*"
            r"(?:[\w.]+\s*\(\s*){0,3}(?:\w+\.)?" + _DECODE
        ),
    ),
    (
        "encoded_exec",
        "powershell_encoded",
        re.compile(
            r"\b(?:powershell|pwsh)(?:\.exe)?\b[^\n]{0,100}\s-e(?:nc|ncodedcommand)?\s+[a-z0-9+/=]{20,}"
        ),
    ),
    (
        "reverse_shell",
        "dev_tcp",
        re.compile(r"/dev/(?:tcp|udp)/[^/\s]+/\d+"),
    ),
    (
        "reverse_shell",
        "netcat_exec",
        re.compile(
            r"\b(?:nc|ncat|netcat)\b[^\n|]{0,100}\s-(?:e|c)\s+['\"]?(?:/bin/)?(?:ba|z|da)?sh\b"
            r"|mkfifo\b[^\n]{0,120}\|\s*(?:/bin/)?(?:ba)?sh\b[^\n]{0,80}\|\s*(?:nc|ncat|netcat|telnet)\b"
            r"|\bsocat\b[^\n]{0,120}\bexec:['\"]?(?:/bin/)?(?:ba)?sh"
            r"|\btelnet\b[^\n]{0,60}\|\s*(?:/bin/)?(?:ba)?sh\b[^\n]{0,40}\|\s*telnet\b"
        ),
    ),
    (
        "reverse_shell",
        "socket_spawn_shell",
        re.compile(
            r"(?:socket\.socket|fsockopen|tcpsocket\.(?:new|open)|net\.connect|new-object\s+system\.net\.sockets\.tcpclient|"
            r"socket\s*\(\s*s\s*,)[\s\S]{0,600}?"
            r"(?:os\.dup2|pty\.spawn|subprocess\.call\(\s*\[\s*['\"]/bin/(?:ba)?sh|['\"]/bin/(?:ba)?sh['\"]\s*,\s*['\"]-i|"
            r"exec\s*\(\s*['\"]/bin/(?:ba)?sh|child_process|\biex\b|invoke-expression|"
            r"proc_open|shell_exec|spawn\s*\(\s*['\"](?:/bin/)?(?:ba)?sh)"
        ),
    ),
    (
        "destructive_command",
        "rm_broad",
        re.compile(
            r"\brm\s+(?:-[a-z]*(?:r[a-z]*f|f[a-z]*r)[a-z]*|-[a-z]*r[a-z]*\s+-[a-z]*f[a-z]*|-[a-z]*f[a-z]*\s+-[a-z]*r[a-z]*|"
            r"--recursive\s+--force|--force\s+--recursive|-r|-rf?)\s+(?:--no-preserve-root\s+)?"
            r"['\"]?(?:/|/\*|~|~/|~/\*|\$home/?\*?|\$\{home\}/?|\*|\.\*|/(?:etc|usr|var|home|bin|boot|lib|lib64|opt|root|sbin|srv|sys|dev|proc)/?\*?)"
            r"['\"]?(?=\s|$|;|&|\||\))"
        ),
    ),
    (
        "destructive_command",
        "disk_wipe",
        re.compile(
            r"\bmkfs(?:\.\w+)?\s+(?:-\S+\s+)*/dev/(?:sd|hd|nvme|xvd|vd|mmcblk|disk)"
            r"|\bdd\s+[^\n]{0,80}\bof=/dev/(?:sd|hd|nvme|xvd|vd|mmcblk|disk)"
            r"|>\s*/dev/(?:sd|hd|nvme)[a-z0-9]*\b"
            r"|:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"
            r"|\bchmod\s+-r\s+0?777\s+/(?:\s|$)"
            r"|\bfind\s+/\s+[^\n]{0,80}-delete\b"
            r"|\bshutil\.rmtree\(\s*['\"](?:/|~|c:\\\\?)['\"]"
            r"|\bremove-item\b[^\n]{0,60}-recurse[^\n]{0,40}\s(?:c:\\\\?\*?|/|~)(?:\s|$)"
            r"|\b(?:del|erase|rd|rmdir)\s+/s\s+/q\s+c:\\\\?(?:\s|$|\*)"
            r"|\bformat\s+c:"
        ),
    ),
    (
        "tls_verification_disabled",
        "tls_off",
        re.compile(
            r"\b(?:requests|httpx|session|sess|client|http|aiohttp|urllib3|get|post|put|patch|delete|head|"
            r"request|asyncclient|urlopen)\b[\w.]*\([^\n]*\bverify\s*=\s*false\b|\.verify\s*=\s*false\b|\bcurl\b[^\n]{0,200}\s(?:-k|--insecure)\b"
            r"|--no-check-certificate|node_tls_reject_unauthorized\s*=\s*['\"]?0"
            r"|rejectunauthorized\s*:\s*false|insecureskipverify\s*:\s*true"
            r"|_create_unverified_context|\bcert_none\b|check_hostname\s*=\s*false"
            r"|pythonhttpsverify\s*=\s*['\"]?0|http\.sslverify\s+false|git_ssl_no_verify\s*=\s*['\"]?(?:1|true)"
            r"|servercertificatevalidationcallback\s*=\s*\{?\s*\$?true|-skipcertificatecheck\b"
            r"|strict-ssl\s+false|\bssl_verify(?:_peer)?\s*[=:]\s*(?:false|0)\b|curlopt_ssl_verifypeer\s*,\s*(?:false|0)"
            r"|danger_accept_invalid_certs\(\s*true|\.tls_insecure_skip_verify|--trusted-host\b"
        ),
    ),
)

# Where each rule's regex runs (normalize.Scanner): anchors, chars before, after.
_ANCHORS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "fetch_pipe_shell": (("curl", "wget", "fetch", "iwr", "irm", "invoke-", "http ", "httpie", "aria2c", "lwp-"), 0, 400),
    "shell_of_fetch": (("curl", "wget", "download", "invoke-", "irm", "iwr", "urlopen(", "requests.get("), 120, 260),
    "decode_pipe_shell": (("base64", "xxd", "certutil", "rev"), 0, 300),
    "eval_decoded": (("atob", "base64", "b64decode", "buffer.from", "fromhex", "unhexlify", "codecs.decode",
                      "frombase64", "gzinflate", "rot13", "zlib", "marshal", "fromcharcode"), 160, 60),
    "powershell_encoded": (("powershell", "pwsh"), 0, 300),
    "dev_tcp": (("/dev/tcp", "/dev/udp"), 0, 80),
    "netcat_exec": (("nc ", "ncat", "netcat", "mkfifo", "socat", "telnet"), 0, 300),
    "socket_spawn_shell": (("socket", "fsockopen", "tcpsocket", "net.connect", "tcpclient"), 40, 900),
    "rm_broad": (("rm ",), 0, 120),
    "disk_wipe": (("mkfs", "dd ", "/dev/", "(){", "chmod", "find /", "rmtree", "remove-item", "del ",
                   "erase ", "rd ", "rmdir", "format c"), 20, 200),
    "tls_off": (("verify", "curl", "certificate", "reject_unauthorized", "rejectunauthorized", "insecure",
                 "unverified", "cert_none", "check_hostname", "sslverify", "ssl_no_verify", "strict-ssl",
                 "ssl_verify", "invalid_certs", "trusted-host"), 200, 200),
}  # fmt: skip

# credential_exfiltration: a read of credential files or the whole environment
# and a send to the network within a few lines of each other.
_CRED_READ = re.compile(
    r"(?:~|\$home|\$\{home\}|%userprofile%|expanduser\(['\"]~)[/\\]?\.?(?:aws/credentials|aws[/\\]|ssh/id_\w+|ssh\b|"
    r"netrc|docker/config\.json|kube/config|git-credentials|npmrc|pypirc|config/gh|config/gcloud|gnupg)"
    r"|/etc/shadow|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|\.env\b(?!ironment)(?![\w-])"
    r"|\bdict\(\s*os\.environ\s*\)|\bos\.environ\.(?:copy|items)\(\)|\bjson\.dumps\(\s*(?:dict\()?os\.environ|"
    r"\bstr\(\s*os\.environ\s*\)|json\.stringify\(\s*process\.env\s*\)|object\.(?:entries|keys)\(\s*process\.env\s*\)|"
    r"\bprintenv\b|(?:^|[\s;|(`$])env\s*(?:\||>|\)|`)|get-childitem\s+env:|\bgci\s+env:|\bset\s*\|"
    r"|security\s+find-(?:generic|internet)-password|\bkeychain\b"
)
_NET_SEND = re.compile(
    r"\b(?:curl|wget|nc|ncat|netcat|scp|rsync|ftp|sftp|telnet)\b|requests\.(?:post|put|get|request)\(|"
    r"\burlopen\(|\bhttp\.client|\bfetch\(|axios\.(?:post|put|get)|\bhttp\.request\(|https\.request\(|"
    r"xmlhttprequest|invoke-(?:webrequest|restmethod)|\biwr\b|\birm\b|smtplib|socket\.send|\.sendall\(|"
    r"\bhttpx\.(?:post|put|get)|net\.webclient|uploadstring|sendbeacon|dns\.resolve"
)
_READ_ANCHORS = ("~", "$home", "${home}", "%userprofile%", "expanduser", "/etc/shadow", "id_rsa", "id_ed",
                 "id_ecdsa", "id_dsa", ".env", "environ", "printenv", "process.env", "env |", "env|", "env)",
                 "env`", "env >", "env:", "keychain", "security find", "set |")  # fmt: skip
_EXFIL_WINDOW = 12  # lines
# One group per rule, in RULES order, then the credential reads.
_SCAN = AnchorSet(*(_ANCHORS[rule][0] for _, rule, _ in RULES), _READ_ANCHORS)


def _around(text: str, offset: int, lines: int) -> tuple[int, int]:
    """The span of ``lines`` lines either side of the line of ``offset``."""
    a = offset
    for _ in range(lines + 1):
        a = text.rfind("\n", 0, a)
        if a < 0:
            break
    b = offset
    for _ in range(lines + 1):
        b = text.find("\n", b + 1)
        if b < 0:
            b = len(text)
            break
    return max(a, 0), b


def find_risky_code(
    folded: str, line_at: Callable[[int], int], end: int | None = None
) -> Iterator[tuple[str, str, int]]:
    """(kind, rule, line) of each risky construct in folded code; ``end``:
    where the text proper ends and decoded segments begin (normalize.py)."""
    scanner = _SCAN.scan(folded)
    hit = scanner.groups()
    for index in sorted(i for i in hit if i < len(RULES)):
        kind, rule, rx = RULES[index]
        anchors, before, after = _ANCHORS[rule]
        for m in scanner.search(rx, anchors, before, after):
            yield kind, rule, line_at(m.start())
    if len(RULES) not in hit:
        return
    reads = [m.start() for m in scanner.search(_CRED_READ, _READ_ANCHORS, 40, 80)]
    if reads:
        # Sends are looked for only within the window's lines of a read (a
        # line of the text is at most a line of the field: the view drops
        # lines, never adds them) and in the decoded segments, whose lines
        # are their source's: not a pass of the alternation over all the code.
        end = len(folded) if end is None else end
        spans = [_around(folded, r, _EXFIL_WINDOW) if r < end else (0, end) for r in reads]
        if end < len(folded):
            spans.append((end, len(folded)))
        sends = [
            line_at(m.start())
            for a, b in merge_spans(spans)
            for m in _NET_SEND.finditer(folded, a, b)
        ]
        for line in (line_at(r) for r in reads):
            if any(abs(line - s) <= _EXFIL_WINDOW for s in sends):
                yield "credential_exfiltration", "read_and_send", line
