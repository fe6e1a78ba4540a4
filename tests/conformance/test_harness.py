"""The isolated runner tells a passing case from one that crashes, hangs or asserts."""
import pytest

from . import harness

MODULE = "conformance._harness_cases"


@pytest.fixture(scope="module", autouse=True)
def _short_timeout():
    harness._ISOLATED.pop(MODULE, None)
    yield
    harness._ISOLATED.pop(MODULE, None)


@pytest.mark.parametrize("case, status", [("case_segfaults", "killed by signal 11"), ("case_hangs", "hung"),
                                          ("case_is_wrong", "exit status 1")])
def test_isolated_reports_the_failure(case, status):
    with pytest.raises(AssertionError, match=status):
        harness.isolated(MODULE, case, timeout=5)


def test_isolated_passes_a_passing_case():
    harness.isolated(MODULE, "case_passes", timeout=5)
