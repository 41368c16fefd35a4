"""The bounded line diff (serve_app/kit/linediff.py): right on small inputs,
difflib's output where both agree on the edit, and bounded on the inputs
that made difflib take seconds (docs/security.md, H1)."""

from __future__ import annotations

import difflib
import random
import time

import pytest

from serve_app.kit import linediff


def _apply(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for tag, i1, i2, j1, j2 in linediff.opcodes(a, b, linediff.Budget()):
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
    return out


def test_opcodes_turn_one_text_into_the_other() -> None:
    rng = random.Random(45)
    for _ in range(2000):
        a = [rng.choice("abcd") + "\n" for _ in range(rng.randint(0, 12))]
        b = [rng.choice("abcd") + "\n" for _ in range(rng.randint(0, 12))]
        assert _apply(a, b) == b
        assert (linediff.unified(a, b, "x", "y", linediff.Budget()) == "") == (a == b)


def test_a_simple_edit_reads_as_difflib_writes_it() -> None:
    a = [f"line {i}\n" for i in range(60)]
    b = list(a)
    b[10] = "changed\n"
    b.insert(30, "added\n")
    del b[50]
    ours = linediff.unified(a, b, "content@1", "content@2", linediff.Budget())
    assert ours == "".join(difflib.unified_diff(a, b, "content@1", "content@2"))


@pytest.mark.parametrize(
    "shape",
    ["blank_after_each", "every_fifth_changed", "every_fortieth_changed"],
)
def test_the_costly_inputs_stop_within_the_budget(shape: str) -> None:
    if shape == "blank_after_each":
        a = [f"step {i:05d}\n" for i in range(14_000)]
        b = [x for line in a for x in (line, "\n")]
    else:
        n, step = (5000, 5) if shape == "every_fifth_changed" else (20_000, 40)
        a = [f"line {i}\n" for i in range(n)]
        b = ["changed\n" if i % step == 0 else line for i, line in enumerate(a)]
    started = time.perf_counter()
    with pytest.raises(linediff.TooLarge):
        linediff.unified(a, b, "a", "b", linediff.Budget())
    # difflib took from 9 s to over a minute on these; generous for a shared machine.
    assert time.perf_counter() - started < 5.0
