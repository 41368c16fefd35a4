"""A unified diff of two texts whose cost is bounded: Myers' O((N+M)·D)
line diff after the common head and tail are cut, stopped past a budget of
steps (then the caller says the diff is too large). difflib's matcher is
quadratic and worse on some inputs (distinct lines each followed by a blank
one; one line repeated through the text), which let one anonymous request
hold a replica for seconds (docs/security.md, H1)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# Edits (lines removed plus lines added) a diff may hold.
MAX_EDITS = 500
# Steps of the search (diagonals tried plus lines matched) one budget allows.
MAX_STEPS = 250_000
CONTEXT = 3


@dataclass
class Budget:
    """Steps left for one request's diffs (shared by its fields)."""

    steps: int = MAX_STEPS


class TooLarge(Exception):
    """The diff needs more edits or steps than allowed."""


# An opcode as difflib spells it: (tag, i1, i2, j1, j2).
Opcode = tuple[str, int, int, int, int]


def _ids(a: list[str], b: list[str]) -> tuple[list[int], list[int]]:
    seen: dict[str, int] = {}
    return [seen.setdefault(x, len(seen)) for x in a], [seen.setdefault(x, len(seen)) for x in b]


def _edits(a: list[int], b: list[int], budget: Budget) -> list[tuple[str, int, int]]:
    """Myers' greedy shortest edit script of a to b, as ('=', i, j), ('-', i, j)
    or ('+', i, j) steps in order; TooLarge past MAX_EDITS or the budget."""
    n, m = len(a), len(b)
    if abs(n - m) > MAX_EDITS:
        raise TooLarge
    limit = min(n + m, MAX_EDITS)
    offset = limit + 1
    v = [0] * (2 * limit + 3)
    trace: list[list[int]] = []
    found = -1
    for d in range(limit + 1):
        # v for k in [-d-1, d+1] as it stood before this round: the backtrack reads it.
        trace.append(v[offset - d - 1 : offset + d + 2])
        budget.steps -= d + 1
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            budget.steps -= x - start
            v[offset + k] = x
            if x >= n and y >= m:
                found = d
                break
        if budget.steps < 0:
            raise TooLarge
        if found >= 0:
            break
    if found < 0:
        raise TooLarge
    steps: list[tuple[str, int, int]] = []
    x, y = n, m
    for d in range(found, -1, -1):
        row = trace[d]
        k = x - y

        def at(kk: int, row: list[int] = row, d: int = d) -> int:
            return row[kk + d + 1]

        prev_k = k + 1 if k == -d or (k != d and at(k - 1) < at(k + 1)) else k - 1
        prev_x = at(prev_k)
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            steps.append(("=", x, y))
        if d > 0:
            if x == prev_x:
                steps.append(("+", x, prev_y))
            else:
                steps.append(("-", prev_x, y))
        x, y = prev_x, prev_y
    steps.reverse()
    return steps


def opcodes(a: list[str], b: list[str], budget: Budget) -> list[Opcode]:
    """difflib-style opcodes turning a into b; TooLarge past the bounds."""
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    ia, ib = _ids(a[head : len(a) - tail], b[head : len(b) - tail])
    codes: list[Opcode] = []

    def add(tag: str, i1: int, i2: int, j1: int, j2: int) -> None:
        if codes and codes[-1][0] == tag:
            last = codes[-1]
            codes[-1] = (tag, last[1], i2, last[3], j2)
        elif codes and {codes[-1][0], tag} <= {"delete", "insert", "replace"}:
            last = codes[-1]
            codes[-1] = ("replace", last[1], i2, last[3], j2)
        else:
            codes.append((tag, i1, i2, j1, j2))

    if head:
        add("equal", 0, head, 0, head)
    for op, i, j in _edits(ia, ib, budget):
        i, j = i + head, j + head
        if op == "=":
            add("equal", i, i + 1, j, j + 1)
        elif op == "-":
            add("delete", i, i + 1, j, j)
        else:
            add("insert", i, i, j, j + 1)
    if tail:
        add("equal", len(a) - tail, len(a), len(b) - tail, len(b))
    return codes


def _grouped(codes: list[Opcode], n: int = CONTEXT) -> Iterator[list[Opcode]]:
    """Hunks with up to ``n`` lines of context (difflib's get_grouped_opcodes)."""
    if not codes:
        codes = [("equal", 0, 1, 0, 1)]
    codes = list(codes)
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    nn = n + n
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > nn:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def unified(a: list[str], b: list[str], fromfile: str, tofile: str, budget: Budget) -> str:
    """A unified diff of two lists of lines (as difflib.unified_diff writes
    it, each line ending in a newline); TooLarge past the bounds."""
    out: list[str] = []
    for group in _grouped(opcodes(a, b, budget)):
        if not out:
            out += [f"--- {fromfile}\n", f"+++ {tofile}\n"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return "".join(x if x.endswith("\n") else x + "\n" for x in out)
