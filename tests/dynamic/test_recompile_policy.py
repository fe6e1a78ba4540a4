"""The recompile policy (config.recompile_limit, accumulated_recompile_limit,
fail_on_recompile_limit_hit) and recompile reasons in the user's terms, each checked
against torch._dynamo in the same test."""
import warnings

import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


@pytest.fixture
def policy():
    saved = (cdynamo.config.recompile_limit, cdynamo.config.accumulated_recompile_limit,
             cdynamo.config.fail_on_recompile_limit_hit)
    yield cdynamo.config
    (cdynamo.config.recompile_limit, cdynamo.config.accumulated_recompile_limit,
     cdynamo.config.fail_on_recompile_limit_hit) = saved


def add_one(x):
    return x + 1


def dynamo_frames(fn, inputs, **kw):
    cnt = torch._dynamo.testing.CompileCounter()
    cf = torch.compile(fn, backend=cnt, **kw)
    for args in inputs:
        cf(*args)
    return cnt.frame_count


def test_static_lengths_past_the_limit_hit_and_run_natively_with_one_warning(policy):
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning while under the limit
        for n in range(1, 9):
            torch.testing.assert_close(cf(torch.ones(n)), torch.ones(n) + 1)
    assert cnt.frame_count == 8
    with pytest.warns(UserWarning) as caught:
        torch.testing.assert_close(cf(torch.ones(9)), torch.ones(9) + 1)  # natively, correct
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert "add_one" in msg and "config.recompile_limit (8)" in msg
    assert "size of dim 0 of L['x']: expected 8, got 9" in msg
    assert cnt.frame_count == 8
    # Lengths 1..8 still hit their entries; another miss runs natively without a new warning.
    hits = cdynamo.stats()["cache_hits"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(1, 9):
            torch.testing.assert_close(cf(torch.ones(n)), torch.ones(n) + 1)
        torch.testing.assert_close(cf(torch.ones(10)), torch.ones(10) + 1)
    assert cdynamo.stats()["cache_hits"] == hits + 8
    assert cnt.frame_count == 8
    assert cdynamo.stats()["native_frames"] == []  # the code is not marked native for good
    assert cnt.frame_count == dynamo_frames(add_one, [(torch.ones(n),) for n in range(1, 11)], dynamic=False)


def test_recompile_limit_setting_applies_at_once(policy):
    policy.recompile_limit = 2
    assert policy.cache_size_limit == 2  # the old name is the same setting
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=False)
    with pytest.warns(UserWarning, match=r"recompile_limit \(2\)"):
        for n in (2, 3, 4, 5):
            torch.testing.assert_close(cf(torch.ones(n)), torch.ones(n) + 1)
    assert cnt.frame_count == 2
    with torch._dynamo.config.patch(recompile_limit=2):
        assert dynamo_frames(add_one, [(torch.ones(n),) for n in (2, 3, 4, 5)], dynamic=False) == 2


def test_fail_on_recompile_limit_hit_raises(policy):
    policy.recompile_limit = 1
    policy.fail_on_recompile_limit_hit = True
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=False)
    cf(torch.ones(2))
    with pytest.raises(cdynamo.FailOnRecompileLimitHit, match=r"add_one.*recompile_limit \(1\).*expected 2, got 3"):
        cf(torch.ones(3))
    torch.testing.assert_close(cf(torch.ones(2)), torch.ones(2) + 1)  # the entry still hits
    assert cnt.frame_count == 1
    dcnt = torch._dynamo.testing.CompileCounter()
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        df = torch.compile(add_one, backend=dcnt, dynamic=False)
        df(torch.ones(2))
        with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
            df(torch.ones(3))
    assert dcnt.frame_count == 1


def test_accumulated_limit_counts_every_configuration(policy):
    policy.accumulated_recompile_limit = 3
    c1, c2 = CompileCounter(), CompileCounter()
    f1 = cdynamo.compile(add_one, backend=c1, dynamic=False)
    f2 = cdynamo.compile(add_one, backend=c2, dynamic=False)
    f1(torch.ones(1))
    f1(torch.ones(2))
    f2(torch.ones(1))  # a first compile for this configuration: not a recompile
    with pytest.warns(UserWarning, match=r"accumulated_recompile_limit \(3\)"):
        torch.testing.assert_close(f2(torch.ones(2)), torch.ones(2) + 1)
    assert (c1.frame_count, c2.frame_count) == (2, 1)
    torch.testing.assert_close(f1(torch.ones(2)), torch.ones(2) + 1)  # still hits
    assert c1.frame_count == 2


def test_accumulated_limit_set_on_torch_config_while_installed(policy):
    # Code written for torch.compile sets torch._dynamo.config's limit: under install() cdynamo
    # keeps it (a patch applies for its block and is undone after).
    with cdynamo.installed_scope():
        with torch._dynamo.config.patch(accumulated_recompile_limit=2):
            assert cdynamo.config.accumulated_recompile_limit == 2
            c1, c2 = CompileCounter(), CompileCounter()
            f1 = torch.compile(add_one, backend=c1, dynamic=False)
            f2 = torch.compile(add_one, backend=c2, dynamic=False)
            f1(torch.ones(1))
            f2(torch.ones(1))
            with pytest.warns(UserWarning, match=r"accumulated_recompile_limit \(2\)"):
                torch.testing.assert_close(f1(torch.ones(2)), torch.ones(2) + 1)
            assert (c1.frame_count, c2.frame_count) == (1, 1)
        assert cdynamo.config.accumulated_recompile_limit == torch._dynamo.config.accumulated_recompile_limit
    with torch._dynamo.config.patch(accumulated_recompile_limit=2):
        dcnt = torch._dynamo.testing.CompileCounter()
        d1 = torch.compile(add_one, backend=dcnt, dynamic=False)
        d2 = torch.compile(add_one, backend=torch._dynamo.testing.CompileCounter(), dynamic=False)
        d1(torch.ones(1))
        d2(torch.ones(1))
        d1(torch.ones(2))
    assert dcnt.frame_count == 1  # torch._dynamo stops at the same count


def test_recompile_reasons_in_user_terms_recorded_on_misses_only(policy):
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=False)
    cf(torch.ones(8))
    cf(torch.ones(9))
    reasons = cdynamo.stats()["recompile_reasons"]
    at = f" (guard from {__file__}:{add_one.__code__.co_firstlineno + 1} in add_one)"  # where x is read
    assert [r["reason"] for r in reasons] == ["size of dim 0 of L['x']: expected 8, got 9" + at]
    assert "add_one" in reasons[0]["function"] and reasons[0]["compiled"]
    cf(torch.ones(8, dtype=torch.float64))
    reasons = cdynamo.stats()["recompile_reasons"]
    # Every entry of the configuration says why it rejected the call, most recent first.
    assert reasons[-1]["reason"] == ("dtype of L['x']: expected torch.float32, got torch.float64" + at + "\n    - "
                                     "dtype of L['x']: expected torch.float32, got torch.float64" + at)
    for _ in range(3):  # hits record nothing
        cf(torch.ones(9))
        cf(torch.ones(8))
    assert len(cdynamo.stats()["recompile_reasons"]) == 2
    assert cnt.frame_count == 3 == dynamo_frames(
        add_one, [(torch.ones(8),), (torch.ones(9),), (torch.ones(8, dtype=torch.float64),)], dynamic=False)


LR = 0.01


def scaled(x):
    return x * LR


def test_global_hyperparameter_change_recompiles_with_reason_and_uses_new_value():
    global LR
    cnt = CompileCounter()
    cf = cdynamo.compile(scaled, backend=cnt)
    x = torch.ones(3)
    try:
        torch.testing.assert_close(cf(x), x * 0.01)
        LR = 0.02
        torch.testing.assert_close(cf(x), x * 0.02)
        torch.testing.assert_close(cf(x), x * 0.02)
    finally:
        LR = 0.01
    assert cnt.frame_count == 2
    assert cdynamo.stats()["recompile_reasons"][-1]["reason"] == (
        f"G['LR'] == 0.01, got 0.02 (guard from {__file__}:{scaled.__code__.co_firstlineno + 1} in scaled)")
    try:
        dcnt = torch._dynamo.testing.CompileCounter()
        df = torch.compile(scaled, backend=dcnt)
        df(x)
        LR = 0.02
        df(x)
    finally:
        LR = 0.01
    assert dcnt.frame_count == 2


def test_recompile_log_names_the_guard(caplog):
    import logging

    cdynamo.set_logs("recompiles")
    try:
        cf = cdynamo.compile(add_one, backend="eager", dynamic=False)
        cf(torch.randn(2, 3))
        with caplog.at_level(logging.INFO, logger="cdynamo"):
            cdynamo._logging.log.propagate = True
            cf(torch.randn(2, 4))
    finally:
        cdynamo._logging.log.propagate = False
        cdynamo.set_logs("")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Recompiling function add_one" in text and "size of dim 1 of L['x']: expected 3, got 4" in text


def helper_times_two(x):
    return x * 2


def calls_helper(x):
    y = x.sin()
    if y.dim() > 0:
        pass
    return helper_times_two(y) + 1


def test_frames_called_past_the_limit_compile_nothing_new(policy):
    # torch._dynamo (skip_code_recursive_on_recompile_limit_hit): a frame past its limit runs
    # natively and what it calls uses the cache entries it has but compiles nothing.
    policy.recompile_limit = 2
    cnt = CompileCounter()
    cf = cdynamo.compile(calls_helper, backend=cnt, dynamic=False)
    shapes = [(3,), (3, 3), (3, 3, 3), (2, 2, 2, 2)]
    with pytest.warns(UserWarning, match=r"recompile_limit \(2\)"):
        for s in shapes:
            x = torch.randn(s)
            torch.testing.assert_close(cf(x), calls_helper(x))
    assert cnt.frame_count == 2  # the helper is inlined; past the limit it is not compiled on its own
    with torch._dynamo.config.patch(recompile_limit=2):
        assert dynamo_frames(calls_helper, [(torch.randn(s),) for s in shapes], dynamic=False) == 2


def test_a_compiled_function_called_past_the_limit_still_compiles(policy):
    policy.recompile_limit = 1
    inner_cnt = CompileCounter()
    inner = cdynamo.compile(helper_times_two, backend=inner_cnt)

    def outer(x, use_inner):
        y = x.cos()
        return inner(y) - 1 if use_inner else y

    cf = cdynamo.compile(outer, backend=CompileCounter(), dynamic=False)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, False), outer(x, False))
    assert inner_cnt.frame_count == 0
    with pytest.warns(UserWarning, match=r"recompile_limit \(1\)"):
        torch.testing.assert_close(cf(x, True), outer(x, True))  # outer runs natively, inner is new
    assert inner_cnt.frame_count == 1  # its own context: it compiles as it needs


def test_submodules_past_the_limit_compile_nothing_new(policy):
    # Instances of one class share entries (the class is guarded); past the limit their
    # frames run natively and the nn.ReLU they call is not compiled as a frame of its own.
    class Sub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(torch.sin(torch.cos(x)))

    policy.recompile_limit = 2
    cnt = CompileCounter()
    subs = [Sub() for _ in range(3)]
    compiled = [cdynamo.compile(m, backend=cnt) for m in subs]
    with pytest.warns(UserWarning, match=r"recompile_limit \(2\)"):
        for size in [(4,), (4, 4), (4, 4, 4)]:
            x = y = torch.randn(size)
            for m, cm in zip(subs, compiled):
                x, y = cm(x), m(y)
            torch.testing.assert_close(x, y)
    assert cnt.frame_count == 2
