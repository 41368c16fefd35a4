"""The content screen: one pure function over the fields of an item.

``screen(fields)`` returns what Cairn does with text others will read
(docs/decisions/safety.md): refusals (secrets, hidden text: the write is
answered 422 and nothing is stored), reasons to hold (instructions aimed at
the reading agent: stored ``held_for_safety``), and labels for risky code
(published, labelled). Findings name the field, the 1-based line and the
kind or rule; never the matched text. Plain Python, no I/O: the services call
it on every write, the benchmark and the unit tests call it directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from serve_app.kit.screening.code import LABEL_KINDS, find_risky_code
from serve_app.kit.screening.hidden import find_hidden
from serve_app.kit.screening.instructions import find_data_urls, find_instructions
from serve_app.kit.screening.normalize import line_of, views
from serve_app.kit.screening.secrets import CAIRN_KEY, find_secrets

# Bump when a rule changes what it catches: stored items carry the version
# that screened them, and a rescreen applies a newer one.
RULESET_VERSION = "2026.11.29"

__all__ = [
    "LABEL_KINDS",
    "RULESET_VERSION",
    "Field",
    "Finding",
    "Verdict",
    "screen",
]

FieldKind = Literal["plain", "markdown", "code"]


@dataclass(frozen=True)
class Field:
    """One field of an item: ``name`` as the API names it (``description``,
    ``code_examples[2].code``), its text, and how it is shown."""

    name: str
    text: str
    kind: FieldKind = "plain"
    language: str | None = None


@dataclass(frozen=True)
class Finding:
    """Where a rule fired: ``kind`` is the category reported to clients
    (secret kind, hidden-text kind, label kind, or ``instruction``), ``rule``
    the specific rule."""

    kind: str
    field: str
    line: int
    rule: str

    def detail(self) -> dict[str, object]:
        return {"field": self.field, "line": self.line, "kind": self.kind}

    def reason(self) -> dict[str, object]:
        return {"rule": self.rule, "field": self.field, "line": self.line}

    def label(self) -> dict[str, object]:
        return {"kind": self.kind, "field": self.field, "line": self.line, "rule": self.rule}


@dataclass(frozen=True)
class Verdict:
    secrets: tuple[Finding, ...] = ()
    hidden: tuple[Finding, ...] = ()
    holds: tuple[Finding, ...] = ()
    labels: tuple[Finding, ...] = ()
    ruleset_version: str = RULESET_VERSION
    # Cairn API keys found in the text, for the service to revoke; never
    # serialised, never logged.
    cairn_keys: tuple[str, ...] = field(default=(), repr=False)

    @property
    def refused(self) -> bool:
        return bool(self.secrets or self.hidden)

    @property
    def held(self) -> bool:
        return not self.refused and bool(self.holds)

    def label_dicts(self) -> list[dict[str, object]]:
        return [f.label() for f in self.labels]

    def reason_dicts(self) -> list[dict[str, object]]:
        return [f.reason() for f in self.holds]


# Generic secret rules, dropped where a provider rule named the same line.
_GENERIC = frozenset({"secret_assignment", "bearer_token"})


def _dedupe(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    findings = list(findings)
    specific = {(f.field, f.line) for f in findings if f.kind not in _GENERIC}
    seen: dict[tuple[str, str, int, str], Finding] = {}
    for f in findings:
        if f.kind in _GENERIC and (f.field, f.line) in specific:
            continue
        seen.setdefault((f.field, f.kind, f.line, f.rule), f)
    return tuple(sorted(seen.values(), key=lambda f: (f.field, f.line, f.kind, f.rule)))


def screen(fields: Iterable[Field]) -> Verdict:
    """Screen every field of one item."""
    secrets: list[Finding] = []
    hidden: list[Finding] = []
    holds: list[Finding] = []
    labels: list[Finding] = []
    cairn_keys: list[str] = []
    for f in fields:
        text = f.text
        if not text:
            continue
        for hit in find_secrets(text):
            secrets.append(Finding(hit.kind, f.name, line_of(text, hit.offset), hit.kind))
            if hit.kind == "cairn_api_key" and CAIRN_KEY.fullmatch(hit.value):
                cairn_keys.append(hit.value)
        for kind, offset in find_hidden(text, markdown=f.kind == "markdown"):
            hidden.append(Finding(kind, f.name, line_of(text, offset), kind))
        seen = views(text, f.kind)
        for rule, offset in find_instructions(seen.prose.text):
            holds.append(Finding("instruction", f.name, seen.prose.line_at(offset), rule))
        if f.kind != "code":
            for rule, offset in find_data_urls(text):
                holds.append(Finding("instruction", f.name, line_of(text, offset), rule))
        # Labels are for code: code fields, and the code inside markdown.
        # A title or a sentence that mentions verify=False is not code.
        if seen.code.text:
            for kind, rule, line in find_risky_code(
                seen.code.text, seen.code.line_at, seen.code.end
            ):
                labels.append(Finding(kind, f.name, line, rule))
    return Verdict(
        secrets=_dedupe(secrets),
        hidden=_dedupe(hidden),
        holds=_dedupe(holds),
        labels=_dedupe(labels),
        cairn_keys=tuple(dict.fromkeys(cairn_keys)),
    )
