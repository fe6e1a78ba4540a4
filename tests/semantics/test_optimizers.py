"""Compiled optimizer steps and training steps, compared with eager over three steps.

An optimizer step is torch.optim's own Python: wrappers (the profiler range, the grad-mode
switch with its two deliberate graph breaks), the optimizer's `step`, `_init_group` (which
creates the state on the first step), and the update functions (`_single_tensor_adam`,
`_multi_tensor_sgd`, ...) that change parameters and state in place and return None. Every
case runs the same steps eagerly, under cdynamo and under torch._dynamo on equal fresh
models; parameters, optimizer state and losses must equal eager's, on the first call (the
state made in the trace) and on the calls after it (the state read back as inputs).

While compiling, torch.optim keeps Adam's step count as a tensor (eagerly it reads it with
`.item()`), so its bias corrections are computed in float32 instead of Python's float64:
compiled Adam differs from eager in the last bits, by as much under torch._dynamo. That is
why the comparison allows 1e-5.
"""
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter

from .harness import check, tensors

STEPS = 3
TOL = dict(rtol=1e-5, atol=1e-5)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def _groups(m):
    # two parameter groups, the second with its own learning rate
    return [{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.005}]


def _grads(m, i):
    g = torch.Generator().manual_seed(100 + i)
    for p in m.parameters():
        p.grad = torch.randn(p.shape, generator=g)


OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.01)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.01, momentum=0.9)),
    "sgd_momentum_foreach": (torch.optim.SGD, dict(lr=0.01, momentum=0.9, foreach=True)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_foreach": (torch.optim.Adam, dict(lr=0.01, foreach=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01)),
    "adamw_foreach": (torch.optim.AdamW, dict(lr=0.01, foreach=True)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01)),
    "rmsprop_foreach": (torch.optim.RMSprop, dict(lr=0.01, foreach=True)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.01)),
    "adagrad_foreach": (torch.optim.Adagrad, dict(lr=0.01, foreach=True)),
    # every other torch.optim optimizer, with the options that take other paths of its update
    "sgd_nesterov_wd_max": (torch.optim.SGD, dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1,
                                                  maximize=True)),
    "adam_amsgrad_wd": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    "adamw_amsgrad_max_foreach": (torch.optim.AdamW, dict(lr=0.01, amsgrad=True, maximize=True, foreach=True)),
    "rmsprop_centered_momentum": (torch.optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.9, weight_decay=0.1)),
    "adadelta": (torch.optim.Adadelta, dict(lr=0.5, weight_decay=0.1)),
    "adadelta_foreach": (torch.optim.Adadelta, dict(lr=0.5, foreach=True)),
    "adamax": (torch.optim.Adamax, dict(lr=0.01, weight_decay=0.1)),
    "adamax_foreach": (torch.optim.Adamax, dict(lr=0.01, foreach=True)),
    "nadam": (torch.optim.NAdam, dict(lr=0.01)),
    "nadam_decoupled_foreach": (torch.optim.NAdam, dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1,
                                                        foreach=True)),
    "radam": (torch.optim.RAdam, dict(lr=0.01)),
    "radam_decoupled_foreach": (torch.optim.RAdam, dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1,
                                                        foreach=True)),
    "asgd": (torch.optim.ASGD, dict(lr=0.01)),
    "asgd_foreach": (torch.optim.ASGD, dict(lr=0.01, foreach=True)),
    "rprop": (torch.optim.Rprop, dict(lr=0.01)),
    "rprop_foreach": (torch.optim.Rprop, dict(lr=0.01, foreach=True)),
}

# The update each optimizer must leave in a graph: a trace that dropped the update (or
# compiled nothing) fails here, not only on the numbers.
# (addcdiv_ with a 0-d tensor value is traced as add_ of the quotient: its binding would read
# the tensor as a number.)
UPDATE_OPS = {"add_", "addcdiv_", "addcmul_", "_foreach_add_", "_foreach_addcdiv_", "_foreach_addcmul_"}


def _state_tensors(opt):
    return [v for s in opt.state.values() for _, v in sorted(s.items()) if isinstance(v, torch.Tensor)]


def _run_steps(name, compiler):
    cls, kw = OPTIMIZERS[name]
    m = _model()
    opt = cls(_groups(m), **kw)

    def step():
        opt.step()

    f = compiler(step) if compiler else step
    for i in range(STEPS):
        _grads(m, i)
        f()
    return m, opt, f


def _targets(gm):
    out = set()
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method"):
            out.add(n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target)))
    return out


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_step_matches_eager(name, dynamo_skips_empty_frames):
    # (the default: a frame with no op runs natively for good, as torch._dynamo skips it)
    m_e, opt_e, _ = _run_steps(name, None)

    cnt = CompileCounter()
    counts = []

    def compiled(step):
        f = cdynamo.compile(step, backend=cnt)

        def call():
            f()
            counts.append(cnt.frame_count)
        return call

    m_c, opt_c, _ = _run_steps(name, compiled)
    for a, b in zip(m_e.parameters(), m_c.parameters()):
        torch.testing.assert_close(b, a, **TOL)
    se, sc = _state_tensors(opt_e), _state_tensors(opt_c)
    assert len(se) == len(sc)
    for a, b in zip(se, sc):
        torch.testing.assert_close(b, a, **TOL)
    # The state made in the first step's trace is real tensors of the optimizer, not fakes.
    assert all(type(t) is torch.Tensor for t in sc)

    # The update is in a graph (not dropped, not run natively).
    assert any(_targets(g) & UPDATE_OPS for g in cnt.graphs), [sorted(_targets(g)) for g in cnt.graphs]
    # The third step is a cache hit: the second one compiled what the state read back needs.
    assert counts[2] == counts[1]

    # The state the first step creates is made for real before the step is traced (as
    # torch._dynamo runs _init_group), so the second step finds what the first one's graph
    # read: no recompile, but for SGD's momentum buffers, which the step itself stores.
    sgd_buffers = name.startswith("sgd_") and ("momentum" in name or "nesterov" in name)
    if not sgd_buffers:
        assert cdynamo.stats()["recompile_reasons"] == []

    # The step's wrapper switched grad mode off around the update and back on after its last
    # graph break (that tail, which only switches grad mode, runs natively: no graph).
    assert torch.is_grad_enabled()
    assert not any(_targets(g) == {"_set_grad_enabled"} for g in cnt.graphs)

    # The update was traced as its capturable variant (tensor math, no break inside the loop
    # over the parameters), but the param groups keep what the program set: an eager step
    # after the compiled ones still takes the eager path (capturable=True asserts on CPU).
    assert all(g.get("capturable", False) is False for g in opt_c.param_groups)

    # torch._dynamo on the same steps: its result is the same, and cdynamo uses no more
    # graphs (one for the step: two with SGD's momentum, whose buffers the step stores).
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounter()
    m_d, _, _ = _run_steps(name, lambda step: torch.compile(step, backend=dcnt))
    for a, b in zip(m_d.parameters(), m_c.parameters()):
        torch.testing.assert_close(b, a, **TOL)
    assert cnt.frame_count <= dcnt.frame_count, (cnt.frame_count, dcnt.frame_count)
    assert cnt.frame_count == (2 if sgd_buffers else 1), cnt.frame_count
    _grads(m_c, STEPS)
    opt_c.step()


def test_step_functions_of_torch_optim_are_traced_not_one_node():
    # torch.optim's update function called directly: it returns None and changes the
    # parameters in place. Recorded as one node it would be dropped (nothing reads its
    # result); traced, its in-place ops are the graph.
    from torch.optim.sgd import _single_tensor_sgd

    def update(w, b, gw, gb):
        with torch.no_grad():
            _single_tensor_sgd([w, b], [gw, gb], [None, None], None, None, weight_decay=0.0, momentum=0.0,
                               lr=0.1, dampening=0.0, nesterov=False, maximize=False, has_sparse_grad=False)
        return w

    check(update, tensors((3, 2), (3,), (3, 2), (3,)), expect_graphs=1)


def test_torch_function_returning_none_runs_natively():
    # torch.nn.utils.vector_to_parameters assigns every parameter's .data and returns None:
    # no graph node can stand for that, so the call runs natively between two graphs.
    lin = torch.nn.Linear(3, 2)
    params = list(lin.parameters())

    def load(v):
        y = v * 2
        torch.nn.utils.vector_to_parameters(y, params)
        return lin.weight.sum() + v

    def world_reset():
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.zero_()

    # (torch._dynamo traces the .data assignments and makes one graph; cdynamo runs the call
    # natively between two.)
    check(load, tensors((8,)), expect_graphs=2, dynamo_reference=False,
          world=(world_reset, lambda: [lin.weight.detach().clone(), lin.bias.detach().clone()]))
    reasons = [r["reason"] for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("vector_to_parameters" in r and "returned None" in r for r in reasons), reasons


def test_record_function_is_a_no_op_in_the_graph():
    def f(x):
        with torch.autograd.profiler.record_function("outer"):
            y = x.sin()
            with torch.profiler.record_function(f"inner#{x.dim()}"):
                y = y * 2
        return y + 1

    check(f, tensors((4,)), expect_graphs=1)
    assert cdynamo.stats()["graph_breaks"] == 0


def _bump(t):
    t.add_(1)
    return None


BUMP = torch._disable_dynamo(_bump)


def test_torch_disable_dynamo_wrapper_runs_natively():
    # A function torch wraps with torch._disable_dynamo: the call is a graph break and runs
    # natively (the wrapper caches a disabled copy on the function the first time: an
    # attribute store outside the trace that must happen for real), the rest is compiled.
    def f(x, buf):
        y = x * 2
        BUMP(buf)
        return y + buf

    check(f, tensors((4,), (4,)), expect_graphs=2)
    reasons = [r["reason"] for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("_bump" in r for r in reasons), reasons


def _train_case(variant, opt_name):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    cls, kw = OPTIMIZERS[opt_name]
    opt = cls(m.parameters(), **kw)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    def train(x, y):
        opt.zero_grad()
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        if variant == "clip":
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)
        opt.step()
        return loss

    return m, opt, sched, train


def _train_data():
    return [(torch.randn(5, 4, generator=torch.Generator().manual_seed(i)),
             torch.randn(5, 1, generator=torch.Generator().manual_seed(50 + i))) for i in range(STEPS)]


def _train(variant, opt_name, compiler):
    m, opt, sched, train = _train_case(variant, opt_name)
    f = compiler(train) if compiler else train
    losses = []
    for x, y in _train_data():
        losses.append(f(x, y).detach())
        if variant == "sched":
            sched.step()
    return losses, m, opt


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("variant", ["plain", "clip", "sched"])
@pytest.mark.parametrize("opt_name", ["adamw", "sgd_momentum"])
def test_train_step_matches_eager(backend, variant, opt_name, dynamo_skips_empty_frames):
    # zero_grad (a torch-disabled function: a break), the forward (a graph), backward (a
    # break), clip_grad_norm_, the step (graphs of their own): losses, parameters and state
    # equal eager's over three steps.
    losses_e, m_e, opt_e = _train(variant, opt_name, None)
    cnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    losses_c, m_c, opt_c = _train(variant, opt_name, lambda fn: cdynamo.compile(fn, backend=cnt))
    for a, b in zip(losses_e, losses_c):
        torch.testing.assert_close(b, a, **TOL)
    for a, b in zip(m_e.parameters(), m_c.parameters()):
        torch.testing.assert_close(b, a, **TOL)
    for a, b in zip(_state_tensors(opt_e), _state_tensors(opt_c)):
        torch.testing.assert_close(b, a, **TOL)
    # the forward is a graph, the update is a graph, and no more graphs than torch._dynamo's
    torch._dynamo.reset()
    dcnt = torch._dynamo.testing.CompileCounterWithBackend(backend)
    _train(variant, opt_name, lambda fn: torch.compile(fn, backend=dcnt))
    # (with the scheduler: torch._dynamo makes the learning rate a graph input once it has
    # changed; cdynamo compiles the step for each of the STEPS values, one graph more here)
    extra = STEPS - 2 if variant == "sched" else 0
    assert cnt.frame_count <= dcnt.frame_count + extra, (cnt.frame_count, dcnt.frame_count)
    assert any("linear" in _targets(g) for g in cnt.graphs), [sorted(_targets(g)) for g in cnt.graphs]
    assert any(_targets(g) & UPDATE_OPS for g in cnt.graphs)
    reasons = [r["reason"] for r in cdynamo.stats()["graph_break_reasons"]]
    assert any("zero_grad" in r for r in reasons) and any("autograd engine" in r for r in reasons), reasons
    if variant == "sched":
        # the learning rate is a Python float of the param group, guarded: each new value
        # compiles the step again (torch._dynamo makes it a graph input after one change)
        recompiles = [str(r) for r in cdynamo.stats()["recompile_reasons"]]
        assert any("['lr']" in r for r in recompiles), recompiles


def _switch_then_break(x, mode):
    # the shape of torch.optim's step wrapper: work, a deliberate break, then only the
    # grad-mode switch before returning
    y = x * 2
    torch._dynamo.graph_break()
    torch.set_grad_enabled(mode)
    return y


@pytest.mark.parametrize("fullgraph_tail", [False, True])
def test_frame_that_only_switches_grad_mode_runs_natively(dynamo_skips_empty_frames, fullgraph_tail):
    # The frame after the break would be a graph of one _set_grad_enabled: it runs natively
    # instead (torch._dynamo skips it), and the mode is switched all the same, on the first
    # call and on the calls after it. Where an entry without ops is used anyway
    # (allow_empty_graphs), its graph keeps the switch.
    cdynamo.config.allow_empty_graphs = True if fullgraph_tail else None
    try:
        cnt = CompileCounter()
        f = cdynamo.compile(_switch_then_break, backend=cnt)
        x = torch.randn(3)
        for _ in range(3):
            torch.set_grad_enabled(True)
            torch.testing.assert_close(f(x, False), x * 2)
            assert not torch.is_grad_enabled()
            torch.set_grad_enabled(False)
            torch.testing.assert_close(f(x, True), x * 2)
            assert torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
        cdynamo.config.allow_empty_graphs = None
    tails = [g for g in cnt.graphs if _targets(g) == {"_set_grad_enabled"}]
    assert any("mul" in _targets(g) for g in cnt.graphs)
    if fullgraph_tail:
        assert tails
    else:
        assert not tails
        native = [n["reason"] for n in cdynamo.stats()["native_frames"]]
        assert any("no op traced" in r for r in native), native


def test_item_is_captured_under_fullgraph():
    # torch._dynamo keeps Tensor.item() in the graph under fullgraph=True whatever
    # capture_scalar_outputs says (a break would be an error there): an optimizer that reads
    # its step count with .item() (Adafactor) compiles as one graph.
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.Adafactor(m.parameters(), lr=0.01)
    m_e = torch.nn.Linear(4, 4)
    m_e.load_state_dict(m.state_dict())
    opt_e = torch.optim.Adafactor(m_e.parameters(), lr=0.01)
    cnt = CompileCounter()
    # (the step without its wrapper's deliberate graph breaks, as torch._dynamo's tests take it)
    unwrapped = opt.step.__wrapped__
    full = cdynamo.compile(lambda: unwrapped(opt), backend=cnt, fullgraph=True)
    for i in range(3):
        for a, b in ((m_e, m), ):
            g = torch.Generator().manual_seed(i)
            for pa, pb in zip(a.parameters(), b.parameters()):
                pa.grad = torch.randn(pa.shape, generator=g)
                pb.grad = pa.grad.clone()
        opt_e.step()
        with torch.no_grad():
            full()
    for a, b in zip(m_e.parameters(), m.parameters()):
        torch.testing.assert_close(b, a, **TOL)
    assert cnt.frame_count == 1
    assert any("item" in _targets(g) for g in cnt.graphs)
