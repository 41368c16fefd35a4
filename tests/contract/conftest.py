"""The contract fuzzer builds its own app over the session database; the fake X
server is the one tests/api uses."""

import pytest
from schemathesis.pytest.plugin import SchemathesisFunction

from tests.api.conftest import x_server  # noqa: F401 - fixture used by name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One node id per fuzzed operation. Schemathesis names each operation's
    item ``test_fuzz[GET /api/x]``, but pytest 9.2 builds an item's id from
    its original name and parameters alone, so every operation had the id
    ``test_fuzz``: reports and ``--durations`` could not tell them apart, and
    pytest-xdist, which schedules by id, ran one operation of 106."""
    for item in items:
        if not isinstance(item, SchemathesisFunction) or "[" in item.nodeid:
            continue
        params = item.name.partition("[")[2].removesuffix("]")
        if params:
            item._id = item._id.with_params(params)  # type: ignore[attr-defined]
    ids = [item.nodeid for item in items]
    assert len(set(ids)) == len(ids), "two tests share a node id"
