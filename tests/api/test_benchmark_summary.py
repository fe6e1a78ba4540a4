"""benchmarks/run.py's verdict line is computed from the run's own targets (a 'not met' row
can never be summarized as 'All targets met')."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "..", "..", "benchmarks", "run.py")


def _run_module(file="run.py"):
    """A module of benchmarks/ (run.py by default), loaded with benchmarks/ on sys.path."""
    import sys
    sys.path.insert(0, os.path.dirname(RUN))
    try:
        spec = importlib.util.spec_from_file_location("cdynamo_bench_" + file[:-3], os.path.join(os.path.dirname(RUN), file))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(os.path.dirname(RUN))


def test_summary_names_targets_not_met():
    run = _run_module()
    targets = [("(1) hit overhead", "0.03", True, ""), ("(3) loop, dynamic=True: tracing >= 10x", "2.4x", False, ""),
               ("(3) encoder", "not captured", False, "why")]
    line = run.summary_line(targets)
    assert "All" not in line
    assert "2 of 3 targets not met" in line
    assert "loop, dynamic=True" in line and "encoder" in line


def test_summary_all_met_only_when_every_target_is():
    run = _run_module()
    assert run.summary_line([("a", "1", True, ""), ("b", "2", True, "")]) == "**All 2 targets met in this run.**"
    line = run.summary_line([("a", "1", True, ""), ("b", "?", None, "")])
    assert "All" not in line and "n/a" in line


def test_a_guard_row_with_no_positive_overhead_is_not_met():
    # The dynamic Sequential row measured cdynamo at -357 us over eager (its graph skips
    # the 40 nn.Module calls eager makes) and used to count as met.
    guards = _run_module("guards.py")
    text, ok = guards.guard_verdict(-356_550.0, 391_910.0, "over eager")
    assert ok is None and text.startswith("n/a")
    assert guards.guard_verdict(0.0, 1000.0, "over its own graph")[1] is None
    assert guards.guard_verdict(1000.0, 20_000.0, "over eager") == ("20.0x (1.0 vs 20.0 us over eager)", True)
    assert guards.guard_verdict(1000.0, 5_000.0, "over eager")[1] is False
    run = _run_module()
    line = run.summary_line([("guards", text, ok, "")])
    assert "All" not in line and "n/a" in line
