"""Documents from man pages (sections 1-8, rendered with ``man -P cat``)."""

from __future__ import annotations

import collections
import gzip
import os
import random
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.search_eval.config import CACHE, MAN_ROOT
from benchmarks.search_eval.text import Raw, clip, squash

# --------------------------------------------------------------------------- man pages


def man_files() -> list[Path]:
    files = []
    for sec in ("man1", "man2", "man3", "man4", "man5", "man7", "man8"):
        for p in sorted((MAN_ROOT / sec).iterdir()):
            if p.name.startswith("gcloud"):
                continue
            if sec == "man3" and not re.search(r"\.3(ssl|type)?\.gz$", p.name):
                continue  # skip perl and X toolkit module pages
            files.append(p)
    gcloud = sorted(
        p
        for p in (MAN_ROOT / "man1").iterdir()
        if p.name.startswith("gcloud") and not p.name.startswith(("gcloud_alpha", "gcloud_beta"))
    )
    random.Random(7).shuffle(gcloud)
    files += gcloud[:500]
    out, seen = [], set()
    for p in files:
        real = p.resolve()  # Debian's alternatives are symlinks (postgresql pages)
        if real in seen or not real.exists() or _man_alias(real):
            continue
        seen.add(real)
        out.append(p)
    return out


def _man_alias(p: Path) -> bool:
    try:
        with gzip.open(p, "rt", errors="replace") as f:
            for line in f:
                if line.startswith(('.\\"', "'\\\"")) or not line.strip():
                    continue
                return line.startswith(".so ")
    except (OSError, EOFError):
        return True
    return True


def render_man(p: Path) -> str:
    dst = CACHE / "man" / (p.parent.name + "__" + p.name + ".txt")
    if dst.exists():
        return dst.read_text()
    env = dict(os.environ, MANWIDTH="1000", LANG="C.UTF-8")
    r = subprocess.run(
        ["man", "-P", "cat", "-l", str(p.resolve())],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
    )
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(r.stdout)
    return r.stdout


MAN_SKIP_SECTIONS = {
    "SEE ALSO",
    "AUTHOR",
    "AUTHORS",
    "COPYRIGHT",
    "REPORTING BUGS",
    "COLOPHON",
    "HISTORY",
    "NOTE",
    "NOTES",
    "BUGS",
    "STANDARDS",
    "CONFORMING TO",
    "ATTRIBUTES",
    "VERSIONS",
    "LICENSE",
    "COPYRIGHT AND LICENSE",
    "AVAILABILITY",
    "TRADEMARKS",
    "GCLOUD WIDE FLAGS",
    "API REFERENCE",
    "LIBRARY",
    "ACKNOWLEDGEMENTS",
    "ACKNOWLEDGMENTS",
    "RESOURCES",
    "MAINTAINERS",
    "CONTACT",
    "COMPATIBILITY",
    "FILES",
    "ENVIRONMENT",
    "EXIT STATUS",
}


def parse_man(text: str) -> tuple[dict[str, str], list[str]] | None:
    text = text.replace("\u2010", "-").replace("\u2212", "-").replace("\u2011", "-")
    lines = text.splitlines()[1:]  # drop the header line
    sections: dict[str, list[str]] = collections.defaultdict(list)
    order: list[str] = []
    current = None
    for line in lines:
        if line and not line[0].isspace():
            head = line.strip()
            if re.fullmatch(r"[A-Z][A-Z0-9 /&,()'-]{1,40}", head):
                current = head
                order.append(head)
                continue
            if current is None:
                continue
            if re.match(r"^\S.*\s{5,}\S.*\(\d", line):  # footer line
                continue
        if current is not None:
            sections[current].append(line.rstrip())
    if "NAME" not in sections:
        return None
    return {k: "\n".join(v).strip("\n") for k, v in sections.items()}, order


def dedent_block(text: str) -> str:
    """Plain text of a rendered section: paragraphs joined, indentation kept small."""
    out: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            if out and out[-1] != "":
                out.append("")
            continue
        indent = len(line) - len(line.lstrip())
        out.append(("  " if indent > 8 else "") + re.sub(r"\s{2,}", "  ", s))
    return "\n".join(out).strip()


def collect_man() -> list[Raw]:
    files = man_files()
    with ThreadPoolExecutor(2) as ex:
        texts = list(ex.map(render_man, files))
    raws = []
    for p, text in zip(files, texts, strict=True):
        parsed = parse_man(text)
        if parsed is None:
            continue
        secs, order = parsed
        name_line = squash(secs["NAME"].strip().split("\n\n")[0])
        m = re.match(r"(.+?)\s+(?:-|\\-|\u2014|\u2013)\s+(.+)", name_line)
        if not m:
            continue
        names, summary = m.group(1).strip(), m.group(2).strip()
        name = names.split(",")[0].strip()
        if len(name) > 60 or len(summary) < 8:
            continue
        section = p.parent.name
        group = "gcloud" if p.name.startswith("gcloud") else section
        desc_key = next((k for k in order if k.startswith("DESCRIPTION")), None)
        body_parts = []
        if desc_key:
            body_parts.append(dedent_block(secs[desc_key]))
        for k in order:
            if k in ("NAME", "SYNOPSIS", desc_key) or k in MAN_SKIP_SECTIONS:
                continue
            if k.startswith("EXAMPLE") and group == "gcloud":
                pass
            block = dedent_block(secs.get(k, ""))
            if block:
                body_parts.append(k.capitalize() + ":\n" + block)
        body = "\n\n".join(b for b in body_parts if b)
        synopsis = squash(secs.get("SYNOPSIS", ""))
        if len(synopsis) > 240:
            synopsis = clip(synopsis, 240)
        if group == "gcloud" or re.fullmatch(r"[A-Z]+(_[A-Z]+)+", name):
            name = name.replace("_", " ")  # gcloud commands, SQL commands
        suffix = p.name.split(".")[-2]
        raws.append(
            Raw(
                source=f"man:{name.replace(' ', '_')}({suffix})",
                group=group,
                name=name,
                summary=summary,
                body=body,
                lead=("Synopsis: " + synopsis) if synopsis else "",
            )
        )
    return raws
