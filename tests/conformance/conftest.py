"""Fixtures of the conformance regressions: clean cdynamo and torch._dynamo around every test."""
import pytest

from semantics import harness as semantics_harness

from . import harness


@pytest.fixture(autouse=True)
def _fresh_compilers(request):
    with semantics_harness.fresh_compilers(harness.CURRENT, request.node.nodeid):
        yield
