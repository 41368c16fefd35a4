"""The abuse suite runs against the same in-process app over real Postgres as
tests/api (and the real Serve service where a finding lives in the proxy path):
the fixtures are those of tests/api/conftest.py."""

from tests.api.conftest import (  # noqa: F401 - fixtures used by name
    _clean,
    app,
    client,
    contract,
    encoder,
    roomy_registration,
    semantic,
    store,
    x,
    x_server,
)
from tests.api.test_notification_stream import live  # noqa: F401 - fixture used by name
