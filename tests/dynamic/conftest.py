import pytest

import cdynamo
from cdynamo._internal import symbolic_shapes


@pytest.fixture(autouse=True)
def _memo_check():
    """Every result the output-metadata memo makes in these tests is compared with what
    running the op on fakes gives (config.memo_check); a difference fails the test."""
    cdynamo.config.memo_check = True
    symbolic_shapes.memo_check_failures.clear()
    yield
    cdynamo.config.memo_check = False
    failures = list(symbolic_shapes.memo_check_failures)
    symbolic_shapes.memo_check_failures.clear()
    assert not failures, failures
