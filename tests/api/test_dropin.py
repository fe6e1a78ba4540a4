"""cdynamo.install(): torch.compile & co. go through cdynamo, torch._dynamo compiles nothing,
and torch.compiler's in-code APIs behave as they do under torch._dynamo.

The in-code API tests run the same program twice, with `frontend` "dynamo" (torch.compile as
shipped) and "cdynamo" (torch.compile after cdynamo.install()), and compare what can be
observed: results, graph counts of a counting backend, errors.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.convert_frame

import cdynamo
from cdynamo.testing import CompileCounter


@pytest.fixture
def dynamo_spy(monkeypatch):
    """Every frame torch._dynamo starts to compile (its convert_frame._compile)."""
    calls = []
    real = torch._dynamo.convert_frame._compile

    def spy(code, *args, **kwargs):
        calls.append(code.co_name)
        return real(code, *args, **kwargs)

    monkeypatch.setattr(torch._dynamo.convert_frame, "_compile", spy)
    return calls


@pytest.fixture
def installed():
    cdynamo.install()
    yield
    cdynamo.uninstall()


@pytest.fixture(params=["dynamo", "cdynamo"])
def frontend(request):
    if request.param == "cdynamo":
        cdynamo.install()
    yield request.param
    if request.param == "cdynamo":
        cdynamo.uninstall()


def _fn(x):
    return (x * 2).sin() + 1


# ---- the switch --------------------------------------------------------------------------

def test_install_replaces_and_uninstall_restores():
    names = [(torch, "compile"), (torch._dynamo, "optimize"), (torch._dynamo, "reset"),
             (torch._dynamo, "allow_in_graph"), (torch.compiler, "allow_in_graph"),
             (torch._dynamo, "assume_constant_result")]
    before = [getattr(o, n) for o, n in names]
    cls_before = type(torch._dynamo.config)
    cdynamo.install()
    try:
        assert cdynamo.installed()
        assert all(getattr(o, n) is not b for (o, n), b in zip(names, before))
        cdynamo.install()  # twice: a no-op
    finally:
        cdynamo.uninstall()
    assert not cdynamo.installed()
    assert [getattr(o, n) for o, n in names] == before
    assert type(torch._dynamo.config) is cls_before


def test_spy_sees_torch_dynamo_when_not_installed(dynamo_spy):
    # The control for the tests below: the spy does catch torch._dynamo compiling.
    cnt = CompileCounter()
    x = torch.randn(4)
    assert torch.equal(torch.compile(_fn, backend=cnt)(x), _fn(x))
    assert dynamo_spy and cnt.frame_count == 1


def test_torch_compile_goes_through_cdynamo(installed, dynamo_spy):
    cnt = CompileCounter()
    f = torch.compile(_fn, backend=cnt)
    x = torch.randn(4)
    assert torch.equal(f(x), _fn(x))
    assert torch.equal(f(x), _fn(x))
    assert cnt.frame_count == 1
    s = cdynamo.stats()
    assert s["frames_captured"] == 1 and s["cache_hits"] == 1
    assert dynamo_spy == []


def test_decorator_forms_and_keywords(installed, dynamo_spy):
    cnt = CompileCounter()

    @torch.compile(backend=cnt, fullgraph=True, dynamic=False)
    def g(x):
        return x.cos() * 3

    x = torch.randn(3)
    assert torch.equal(g(x), x.cos() * 3)
    assert cnt.frame_count == 1
    with pytest.raises(cdynamo.Unsupported):
        torch.compile(lambda x: torch._dynamo.graph_break() or x + 1, backend=cnt, fullgraph=True)(x)
    assert torch.compile(_fn, disable=True) is _fn
    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(_fn, mode="default", options={})
    assert dynamo_spy == []


def test_module_compile_and_named_backends(installed, dynamo_spy):
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    expected = m(x)
    m.compile(backend="eager")  # nn.Module.compile() calls torch.compile itself
    assert torch.allclose(m(x), expected)
    assert cdynamo.stats()["frames_captured"] >= 1
    assert "aot_eager" in torch._dynamo.list_backends(None) or "aot_eager" in torch._dynamo.list_backends()
    assert torch.allclose(torch.compile(_fn, backend="aot_eager")(x), _fn(x))
    assert dynamo_spy == []


def test_compiled_module_is_a_torch_optimized_module(installed, dynamo_spy):
    # Libraries tell a compiled module by torch's wrapper class (to unwrap _orig_mod, or to
    # skip compiling it twice): under install() the wrapper cdynamo returns is one.
    import copy
    import pickle

    from torch._dynamo.eval_frame import OptimizedModule as TorchOptimizedModule

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    expected = m(x)
    c = torch.compile(m, backend="eager")
    assert isinstance(c, TorchOptimizedModule) and isinstance(c, cdynamo.OptimizedModule)
    unwrapped = c._orig_mod if isinstance(c, TorchOptimizedModule) else c
    assert unwrapped is m
    assert torch.allclose(c(x), expected) and cdynamo.stats()["frames_captured"] >= 1
    assert len(c) == 2 and list(c.state_dict())[0] == "_orig_mod.0.weight"
    c.eval()
    assert not m.training and not c.training
    for clone in (copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert isinstance(clone, TorchOptimizedModule) and clone._orig_mod is not m
        assert torch.allclose(clone(x), expected)
    assert dynamo_spy == []


def test_registered_backend_and_mode_options(installed, dynamo_spy):
    seen = []

    def my_backend(gm, example_inputs, **kwargs):
        seen.append(kwargs)
        return gm.forward

    torch._dynamo.register_backend(my_backend, name="cdynamo_test_backend")
    x = torch.randn(5)
    assert torch.equal(torch.compile(_fn, backend="cdynamo_test_backend")(x), _fn(x))
    assert torch.equal(torch.compile(lambda x: x - 1, backend="cdynamo_test_backend", options={"k": 1})(x), x - 1)
    assert seen == [{}, {"options": {"k": 1}}]
    assert dynamo_spy == []


def test_optimize_and_reset(installed, dynamo_spy):
    cnt = CompileCounter()
    f = torch._dynamo.optimize(cnt)(_fn)
    x = torch.randn(4)
    assert torch.equal(f(x), _fn(x))
    assert cnt.frame_count == 1 and cdynamo.cache_entries(_fn)
    torch.compiler.reset()  # calls torch._dynamo.reset(): cdynamo's cache goes too
    assert cdynamo.cache_entries(_fn) == []
    assert torch.equal(f(x), _fn(x))
    assert cnt.frame_count == 2
    assert torch._dynamo.optimize(cnt, disable=True)(_fn) is _fn
    assert dynamo_spy == []


def test_library_code_calling_torch_compile(installed, dynamo_spy):
    # A "library" that calls torch.compile from its own module, as transformers does.
    import types

    lib = types.ModuleType("fake_lib")
    exec("import torch\ndef build(fn):\n    return torch.compile(fn, backend='eager')\n", lib.__dict__)
    x = torch.randn(3)
    assert torch.equal(lib.build(_fn)(x), _fn(x))
    assert cdynamo.stats()["frames_captured"] == 1
    assert dynamo_spy == []


# ---- torch.compiler's in-code APIs, side by side ------------------------------------------

def test_is_compiling(frontend):
    def f(x):
        if torch.compiler.is_compiling() and torch._dynamo.is_compiling():
            return x + 1
        return x - 1

    cnt = CompileCounter()
    x = torch.zeros(2)
    assert torch.equal(torch.compile(f, backend=cnt)(x), x + 1)
    assert torch.equal(f(x), x - 1)
    assert cnt.frame_count == 1


def test_graph_break(frontend):
    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    cnt = CompileCounter()
    x = torch.randn(3)
    assert torch.equal(torch.compile(f, backend=cnt)(x), f(x))
    assert cnt.frame_count == 2


def _called_by_disabled(x):
    return x.tan()  # never in a graph, never compiled as a frame of its own


@torch.compiler.disable
def _disabled_helper(x):
    return _called_by_disabled(x)


def test_disable(frontend):
    def f(x):
        y = x.sin()
        y = _disabled_helper(y)
        return y.cos()

    cnt = CompileCounter()
    x = torch.randn(3)
    assert torch.equal(torch.compile(f, backend=cnt)(x), f(x))
    assert cnt.frame_count == 2
    targets = {getattr(n.target, "__name__", n.target) for g in cnt.graphs for n in g.graph.nodes}
    assert "tan" not in targets
    if frontend == "cdynamo":
        assert not cdynamo.cache_entries(_called_by_disabled)


def test_disable_is_cdynamo_disable():
    def f(x):
        return _disabled_helper(x.sin()).cos()

    cnt = CompileCounter()
    x = torch.randn(3)
    assert torch.equal(cdynamo.compile(f, backend=cnt)(x), f(x))
    assert cnt.frame_count == 2
    assert "_disabled_helper" in cdynamo.stats()["graph_break_reasons"][0]["reason"]


def test_allow_in_graph(frontend):
    def helper(x):
        return x.sin() + 1

    torch._dynamo.allow_in_graph(helper)
    try:
        def f(x):
            return helper(x) * 2

        cnt = CompileCounter()
        x = torch.randn(3)
        assert torch.equal(torch.compile(f, backend=cnt)(x), f(x))
        assert cnt.frame_count == 1
        assert helper in [n.target for n in cnt.graphs[0].graph.nodes]
    finally:
        torch._dynamo.disallow_in_graph(helper)
        cdynamo.disallow_in_graph(helper)


_const = {"value": 3}


@torch.compiler.assume_constant_result
def _constant_config():
    return _const["value"]


def test_assume_constant_result(frontend):
    def f(x):
        return x * _constant_config()

    cnt = CompileCounter()
    cf = torch.compile(f, backend=cnt)
    x = torch.ones(2)
    _const["value"] = 3
    try:
        assert torch.equal(cf(x), x * 3)
        _const["value"] = 4  # not guarded: the compiled code keeps the constant
        assert torch.equal(cf(x), x * 3)
        assert cnt.frame_count == 1
    finally:
        _const["value"] = 3


def test_stance_force_eager(frontend):
    cnt = CompileCounter()
    f = torch.compile(_fn, backend=cnt)
    x = torch.randn(3)
    with torch.compiler.set_stance("force_eager"):
        assert torch.equal(f(x), _fn(x))
    assert cnt.frame_count == 0
    f(x)
    assert cnt.frame_count == 1

    @torch.compiler.set_stance("force_eager")
    def run():
        return f(torch.randn(5))

    run()
    assert cnt.frame_count == 1


def test_stance_eager_on_recompile(frontend):
    def g(x):
        return x * 5

    cnt = CompileCounter()
    f = torch.compile(g, backend=cnt)
    f(torch.randn(2))
    torch.compiler.set_stance("eager_on_recompile")
    try:
        assert torch.equal(f(torch.ones(3)), torch.ones(3) * 5)  # runs eagerly
        assert torch.equal(f(torch.ones(2)), torch.ones(2) * 5)  # the cached entry still runs
        h = torch.compile(lambda x: x - 2, backend=cnt)
        assert torch.equal(h(torch.ones(2)), torch.ones(2) - 2)  # nothing new is compiled
    finally:
        torch.compiler.set_stance("default")
    assert cnt.frame_count == 1


def test_stance_fail_on_recompile(frontend):
    def g(x):
        return x * 7

    cnt = CompileCounter()
    f = torch.compile(g, backend=cnt)
    f(torch.randn(2))
    with torch.compiler.set_stance("fail_on_recompile"):
        assert torch.equal(f(torch.ones(2)), torch.ones(2) * 7)
        with pytest.raises(RuntimeError, match="Detected recompile when torch.compile stance is 'fail_on_recompile'"):
            f(torch.ones(3))
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            torch.compile(lambda x: x + 3, backend=cnt)(torch.ones(2))
    assert cnt.frame_count == 1
    assert torch.equal(f(torch.ones(3)), torch.ones(3) * 7)
    assert cnt.frame_count == 2


def test_config_patch_recompile_limit(frontend):
    def g(x):
        return x + 2

    cnt = CompileCounter()
    f = torch.compile(g, backend=cnt)
    with torch._dynamo.config.patch(recompile_limit=1):
        for n in (2, 3, 4):
            assert torch.equal(f(torch.ones(n)), torch.ones(n) + 2)
    assert cnt.frame_count == 1


def test_config_patch_capture_scalar_outputs(frontend):
    def g(x):
        return x * x.sum().item()

    cnt = CompileCounter()
    x = torch.ones(3)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        assert torch.equal(torch.compile(g, backend=cnt)(x), g(x))
    assert cnt.frame_count == 1


def test_mark_dynamic_and_static(frontend):
    # torch._dynamo's marks, read by whichever frontend compiles: a dim marked dynamic before
    # the first call serves every length from one graph; a dim marked static under
    # dynamic=True is specialized (a graph per length).
    cnt = CompileCounter()
    f = torch.compile(lambda a: a * 2, backend=cnt)
    for n in (4, 5, 6):
        x = torch.randn(n, 3)
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(f(x), x * 2)
    assert cnt.frame_count == 1
    cnt2 = CompileCounter()
    g = torch.compile(lambda b: b - 2, backend=cnt2, dynamic=True)
    for n in (4, 5):
        y = torch.randn(n, 3)
        torch._dynamo.mark_static(y, 0)
        assert torch.equal(g(y), y - 2)
    assert cnt2.frame_count == 2


def test_cdynamo_set_stance_api():
    cnt = CompileCounter()
    f = cdynamo.compile(_fn, backend=cnt)
    with cdynamo.set_stance("force_eager"):
        f(torch.randn(2))
        assert cdynamo.get_stance() == "force_eager"
    assert cdynamo.get_stance() == "default" and cnt.frame_count == 0
    with pytest.raises(NotImplementedError):
        cdynamo.set_stance("eager_then_compile")


def test_allow_in_graph_function_without_tensor_result_runs_with_the_graph():
    # A function allowed in the graph that returns None (a check, a log): its node stays in
    # the graph and runs on every call of the compiled function, not only while tracing,
    # as torch._dynamo keeps it.
    seen = []

    def note(x):
        seen.append(x.shape[0])

    cdynamo.allow_in_graph(note)
    try:
        def f(x):
            y = x * 2
            note(y)
            return y + 1

        cdynamo.reset()
        cnt = CompileCounter()
        cf = cdynamo.compile(f, backend=cnt)
        x = torch.randn(3)
        seen.clear()
        for _ in range(2):
            assert torch.equal(cf(x), f(x))
        assert cnt.frame_count == 1
        assert note in [n.target for n in cnt.graphs[0].graph.nodes]
        # each compiled call ran it (the trace ran it once more, on fake tensors)
        assert seen.count(3) == 2 + 2 + 1
    finally:
        cdynamo.disallow_in_graph(note)
