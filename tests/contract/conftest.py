"""The contract fuzzer builds its own app over the session database; the fake X
server is the one tests/api uses."""

from tests.api.conftest import x_server  # noqa: F401 - fixture used by name
