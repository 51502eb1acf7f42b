"""A real redis-server for the lanes' state kept in a shared backend (replicas)."""

from __future__ import annotations

import pytest

from deltaguard.state.backends import open_backend
from tests.support.state_servers import redis_server


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


@pytest.fixture()
def redis_pair(redis_url):
    """Two clients of one freshly emptied Redis: two replicas' connections."""
    backends = [open_backend(redis_url), open_backend(redis_url)]
    backends[0]._client.flushdb()
    yield backends
    for backend in backends:
        backend.close()
