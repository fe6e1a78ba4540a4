import pytest
import torch

import cdynamo


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Every test starts with empty cdynamo and torch._dynamo caches and counters."""
    cdynamo.reset()
    torch._dynamo.reset()
    yield
    cdynamo.reset()
    torch._dynamo.reset()
