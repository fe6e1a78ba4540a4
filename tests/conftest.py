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


@pytest.fixture(autouse=True)
def _capture_frames_without_ops(request):
    """Frames whose trace has no op keep their cache entry in the suite
    (config.allow_empty_graphs): most conformance programs have no tensor op, and skipped
    for good (torch._dynamo's default) they would run natively and test nothing. A test of
    the default behaviour uses the `dynamo_skips_empty_frames` fixture."""
    if "dynamo_skips_empty_frames" in request.fixturenames:
        yield
        return
    cdynamo.config.allow_empty_graphs = True
    yield
    cdynamo.config.allow_empty_graphs = None


@pytest.fixture
def dynamo_skips_empty_frames():
    """The default: a frame without ops runs natively for good, as torch._dynamo skips it."""
    cdynamo.config.allow_empty_graphs = None
    yield
