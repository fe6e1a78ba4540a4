"""Dynamic shapes: automatic dynamic, dynamic=True, mark_dynamic, symbolic
sizes in the trace, shape guards in the C++ guard program. Every case compares with eager
on the first call and on cache hits, and its compile count with torch._dynamo's."""
import pytest
import torch
import torch._dynamo.testing

import cdynamo
from cdynamo.testing import CompileCounter


def dynamo_count(fn, calls, **kw):
    cnt = torch._dynamo.testing.CompileCounter()
    cf = torch.compile(fn, backend=cnt, **kw)
    for args in calls:
        cf(*args)
    return cnt.frame_count


def sym_placeholders(gm):
    return [n.name for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt)]


def check(cf, fn, *args):
    expected = fn(*args)
    got = cf(*args)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(cf(*args), expected)  # a cache hit


def add_one(x):
    return x + 1


def test_automatic_dynamic_two_compiles_then_every_length_hits():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    for n in (2, 3, 4, 5, 6):
        check(cf, add_one, torch.randn(n))
    assert cnt.frame_count == 2
    assert sym_placeholders(cnt.graphs[0]) == [] and len(sym_placeholders(cnt.graphs[1])) == 1
    for n in (7, 20, 33):
        check(cf, add_one, torch.randn(n))
    assert cnt.frame_count == 2
    assert cnt.frame_count == dynamo_count(add_one, [(torch.randn(n),) for n in (2, 3, 4, 5, 6, 7, 20, 33)])
    reasons = [r["reason"] for r in cdynamo.stats()["recompile_reasons"]]
    assert reasons == ["size of dim 0 of L['x']: expected 2, got 3 "
                       f"(guard from {__file__}:{add_one.__code__.co_firstlineno + 1} in add_one)"]


def test_automatic_dynamic_only_the_changed_dim():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    for n in (2, 3, 9):
        check(cf, add_one, torch.randn(n, 5))
    assert cnt.frame_count == 2
    check(cf, add_one, torch.randn(4, 6))  # dim 1 was static: a recompile, now dim 1 symbolic too
    assert cnt.frame_count == 3
    calls = [(torch.randn(n, 5),) for n in (2, 3, 9)] + [(torch.randn(4, 6),)]
    assert cnt.frame_count == dynamo_count(add_one, calls)


def test_automatic_dynamic_with_sizes_one_and_zero_specialized():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    for n in (3, 4):
        check(cf, add_one, torch.randn(n))
    assert cnt.frame_count == 2
    check(cf, add_one, torch.randn(1))  # the symbolic entry assumes size >= 2 (0/1 specialization)
    check(cf, add_one, torch.randn(0))
    assert cnt.frame_count == 4
    assert "L['x'].size()[0] >= 2" in cdynamo.stats()["recompile_reasons"][-2]["reason"]


def test_dynamic_false_never_symbolic():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=False)
    for n in (2, 3, 4):
        check(cf, add_one, torch.randn(n))
    assert cnt.frame_count == 3 == dynamo_count(add_one, [(torch.randn(n),) for n in (2, 3, 4)], dynamic=False)
    assert all(sym_placeholders(g) == [] for g in cnt.graphs)


def test_dynamic_true_one_entry_for_every_length():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=True)
    for n in (5, 6, 7, 100):
        check(cf, add_one, torch.randn(n, 3))
    assert cnt.frame_count == 1
    assert len(sym_placeholders(cnt.graphs[0])) == 2
    assert dynamo_count(add_one, [(torch.randn(n, 3),) for n in (5, 6, 7, 100)], dynamic=True) == 1


def test_mark_dynamic_before_the_first_call():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    x = torch.randn(4, 3)
    cdynamo.mark_dynamic(x, 0)
    check(cf, add_one, x)
    for n in (5, 9, 17):
        check(cf, add_one, torch.randn(n, 3))
    assert cnt.frame_count == 1
    y = torch.randn(4, 3)
    torch._dynamo.mark_dynamic(y, 0)
    assert dynamo_count(add_one, [(y,)] + [(torch.randn(n, 3),) for n in (5, 9, 17)]) == 1


def test_torch_mark_dynamic_with_range_is_guarded():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    x = torch.randn(4)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=10)
    check(cf, add_one, x)
    check(cf, add_one, torch.randn(10))
    assert cnt.frame_count == 1
    check(cf, add_one, torch.randn(11))  # outside the marked range: another entry
    assert cnt.frame_count == 2
    assert "L['x'].size()[0] <= 10" in cdynamo.stats()["recompile_reasons"][-1]["reason"]


def test_mark_static_wins_over_dynamic_true():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt, dynamic=True)
    x = torch.randn(4, 3)
    cdynamo.mark_static(x, 1)
    check(cf, add_one, x)
    assert sym_placeholders(cnt.graphs[0]) == ["s0"] or len(sym_placeholders(cnt.graphs[0])) == 1


def branchy(x):
    if x.shape[0] > 4:
        return x + 1
    return x - 1


def test_branch_on_a_symbolic_size_is_a_shape_guard():
    cnt = CompileCounter()
    cf = cdynamo.compile(branchy, backend=cnt, dynamic=True)
    for n in (5, 6, 7):
        check(cf, branchy, torch.randn(n))
    assert cnt.frame_count == 1
    check(cf, branchy, torch.randn(3))
    assert cnt.frame_count == 2
    for n in (2, 4, 5, 8):
        check(cf, branchy, torch.randn(n))
    assert cnt.frame_count == 2
    reason = cdynamo.stats()["recompile_reasons"][0]["reason"]
    # The branch's own guard (ranges it implied are checked after it), and where it came from.
    assert "L['x'].size()[0] > 4" in reason and "L['x'].size()[0] = 3" in reason
    assert f"(guard from {__file__}:{branchy.__code__.co_firstlineno + 1} in branchy)" in reason
    calls = [(torch.randn(n),) for n in (5, 6, 7, 3, 2, 4, 5, 8)]
    assert cnt.frame_count == dynamo_count(branchy, calls, dynamic=True)


def add(x, y):
    return x + y


def test_relation_between_inputs_is_guarded_and_mismatch_raises_like_eager():
    cnt = CompileCounter()
    cf = cdynamo.compile(add, backend=cnt, dynamic=True)
    check(cf, add, torch.randn(5), torch.randn(5))
    check(cf, add, torch.randn(8), torch.randn(8))
    assert cnt.frame_count == 1
    with pytest.raises(RuntimeError) as eager:
        add(torch.randn(6), torch.randn(7))
    with pytest.raises(RuntimeError) as compiled:
        cf(torch.randn(6), torch.randn(7))
    assert str(compiled.value) == str(eager.value)
    check(cf, add, torch.randn(3), torch.randn(3))  # the entry still serves equal sizes
    guards = cdynamo.cache_entries(add)[-1]["guards"]
    assert "L['y'].size()[0] == L['x'].size()[0]" in guards
    assert cnt.frame_count == 1
    calls = [(torch.randn(n), torch.randn(n)) for n in (5, 8, 3)]
    assert cnt.frame_count <= dynamo_count(add, calls, dynamic=True)


def test_broadcast_relation_from_different_sizes():
    cnt = CompileCounter()
    cf = cdynamo.compile(add, backend=cnt, dynamic=True)
    check(cf, add, torch.randn(5, 1), torch.randn(1, 7))
    check(cf, add, torch.randn(6, 1), torch.randn(1, 9))
    assert cnt.frame_count == 1
    calls = [(torch.randn(5, 1), torch.randn(1, 7)), (torch.randn(6, 1), torch.randn(1, 9))]
    assert cnt.frame_count <= dynamo_count(add, calls, dynamic=True)


def sizes_in_the_trace(x):
    n = x.shape[0]
    y = x.view(n // 2, -1) * 2
    return y, x.size(1) * 2, n


def test_symbolic_sizes_in_the_trace():
    cnt = CompileCounter()
    cf = cdynamo.compile(sizes_in_the_trace, backend=cnt, dynamic=True)
    for n in (4, 6, 10):
        x = torch.randn(n, 3)
        expected = sizes_in_the_trace(x)
        got = cf(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] and type(got[2]) is int
    assert cnt.frame_count == 1
    assert dynamo_count(sizes_in_the_trace, [(torch.randn(n, 3),) for n in (4, 6, 10)], dynamic=True) == 1


def test_symbolic_graph_with_aot_eager_training():
    lin = torch.nn.Linear(3, 4)

    def f(x):
        return lin(x).relu().sum()

    cf = cdynamo.compile(f, backend="aot_eager", dynamic=True)
    for n in (4, 5, 8):
        x = torch.randn(n, 3, requires_grad=True)
        lin.zero_grad()
        expected = f(x)
        expected.backward()
        eg = (x.grad.clone(), lin.weight.grad.clone())
        x.grad = None
        lin.zero_grad()
        got = cf(x)
        got.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(x.grad, eg[0])
        torch.testing.assert_close(lin.weight.grad, eg[1])
    assert cdynamo.stats()["frames_captured"] == 1


def loop(x, n):
    y = x * 2
    for i in range(n):
        y = y + i
    return y


def test_range_of_an_int_argument_unrolls_and_recompiles():
    cnt = CompileCounter()
    cf = cdynamo.compile(loop, backend=cnt)
    x = torch.randn(4)
    check(cf, loop, x, 3)
    assert (cnt.frame_count, cnt.op_count) == (1, 4)
    check(cf, loop, x, 5)
    assert (cnt.frame_count, cnt.op_count) == (2, 4 + 6)
    assert cnt.frame_count == dynamo_count(loop, [(x, 3), (x, 5)])


def scale(x, s):
    return x * s


def test_int_argument_that_changes_two_compiles():
    cnt = CompileCounter()
    cf = cdynamo.compile(scale, backend=cnt)
    x = torch.randn(4)
    for s in (2, 3, 4):
        check(cf, scale, x, s)
    assert cnt.frame_count == 2 == dynamo_count(scale, [(x, s) for s in (2, 3, 4)])
    # The second graph takes the int as a SymInt input, guarded by its type.
    (sym,) = [n for n in cnt.graphs[1].graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("example_value"),
                                                                                               torch.SymInt)]
    assert "type(L['s']) is int" in cdynamo.cache_entries(scale)[0]["guards"]
    check(cf, scale, x, 7)
    check(cf, scale, torch.randn(4, dtype=torch.float64), 9)  # a new dtype: a recompile, s stays symbolic
    assert cnt.frame_count == 3


def loop_n(x, n):
    for i in range(n):
        x = x + i
    return x


def test_int_argument_the_program_needs_as_a_constant_is_specialized():
    # range(n) needs n's value: the trace with n symbolic does not complete, so n is
    # specialized (as torch._dynamo specializes it) and each value is its own graph.
    cnt = CompileCounter()
    cf = cdynamo.compile(loop_n, backend=cnt)
    x = torch.randn(3)
    for n in (3, 5, 7, 5):
        check(cf, loop_n, x, n)
    assert cnt.frame_count == 3 == dynamo_count(loop_n, [(x, n) for n in (3, 5, 7, 5)])
    assert [len([n for n in g.graph.nodes if n.op == "call_function"]) for g in cnt.graphs] == [3, 5, 7]
    assert cdynamo.stats()["native_frames"] == [] and cdynamo.stats()["graph_breaks"] == 0


def int_method(x, n):
    return x * 2 if n.conjugate() else x


def test_int_argument_specialized_under_fullgraph_too():
    # A method of the int the trace cannot call on a symbol: the trace with n symbolic fails
    # (with fullgraph=True as cdynamo.Unsupported), n is specialized and the trace runs
    # again, instead of raising to the user.
    cnt = CompileCounter()
    cf = cdynamo.compile(int_method, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    calls = (0, 1, 2, 1)
    for n in calls:
        check(cf, int_method, x, n)  # raised cdynamo.Unsupported from the second value on
    # One graph per value at most (torch._dynamo keeps n symbolic here: 2 graphs; cdynamo
    # cannot call int methods on a symbol yet, so n is specialized).
    assert 2 <= cnt.frame_count <= len(set(calls))
    assert cdynamo.stats()["native_frames"] == [] and cdynamo.stats()["graph_breaks"] == 0


def int_branch(x, n):
    if n > 3:
        return x + n
    return x - n


def test_int_argument_branch_becomes_a_shape_guard():
    cnt = CompileCounter()
    cf = cdynamo.compile(int_branch, backend=cnt)
    x = torch.randn(3)
    calls = (5, 6, 7, 2, 8, 3)
    for n in calls:
        check(cf, int_branch, x, n)
    assert cnt.frame_count == 3 == dynamo_count(int_branch, [(x, n) for n in calls])
    reason = cdynamo.stats()["recompile_reasons"][-1]["reason"]
    assert "L['n'] > 3" in reason and "L['n'] = 2" in reason


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


def test_three_instances_of_one_module_class_share_one_graph():
    cnt = CompileCounter()
    mods = [Block() for _ in range(3)]
    x = torch.randn(2, 4)
    for m in mods:
        cm = cdynamo.compile(m, backend=cnt)
        check(cm, m, x)
    assert cnt.frame_count == 1
    dcnt = torch._dynamo.testing.CompileCounter()
    for m in mods:
        torch.compile(m, backend=dcnt)(x)
    assert cnt.frame_count <= dcnt.frame_count


def test_replaced_parameter_same_shape_no_recompile_float64_recompiles_naming_dtype():
    cnt = CompileCounter()
    m = Block()
    cm = cdynamo.compile(m, backend=cnt)
    x = torch.randn(2, 4)
    check(cm, m, x)
    m.lin.weight = torch.nn.Parameter(torch.randn(4, 4))
    check(cm, m, x)  # new values used, same entry
    assert cnt.frame_count == 1
    m.double()
    check(cm, m, x.double())
    assert cnt.frame_count == 2
    assert "dtype of" in cdynamo.stats()["recompile_reasons"][-1]["reason"]
    assert "torch.float64" in cdynamo.stats()["recompile_reasons"][-1]["reason"]
    m = Block()
    dcnt = torch._dynamo.testing.CompileCounter()
    dm = torch.compile(m, backend=dcnt)
    dm(x)
    m.lin.weight = torch.nn.Parameter(torch.randn(4, 4))
    dm(x)
    assert dcnt.frame_count == 1
    m.double()
    dm(x.double())
    assert cnt.frame_count <= dcnt.frame_count == 2


def test_shape_guards_run_in_the_guard_program_without_python():
    cf = cdynamo.compile(branchy, backend="eager", dynamic=True)
    cf(torch.randn(6))
    guards = cdynamo.cache_entries(branchy)[0]["guards"]
    assert "L['x'].size()[0] > 4" in guards or "4 < L['x'].size()[0]" in guards
    assert "size=[*]" in guards  # the tensor check leaves the symbolic dim to the shape guards


def make_encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def test_transformer_encoder_over_sequence_lengths_at_most_two_compiles():
    enc = make_encoder().eval()
    cnt = CompileCounter()
    cenc = cdynamo.compile(enc, backend=cnt)
    with torch.no_grad():
        for n in range(8, 65, 8):
            check(cenc, enc, torch.randn(2, n, 16))
    assert cnt.frame_count <= 2
    assert cdynamo.stats()["native_frames"] == []
    with torch.no_grad():
        d = dynamo_count(enc, [(torch.randn(2, n, 16),) for n in range(8, 65, 8)])
    assert cnt.frame_count <= d


def test_transformer_encoder_training_aot_eager_gradients_equal():
    enc = make_encoder().train()
    ref = make_encoder().train()
    cenc = cdynamo.compile(enc, backend="aot_eager")
    lengths = range(8, 65, 8)
    for n in lengths:
        x = torch.randn(2, n, 16)
        for _ in range(2):  # the first call and a hit
            enc.zero_grad()
            ref.zero_grad()
            out, expected = cenc(x), ref(x)
            torch.testing.assert_close(out, expected)
            out.square().sum().backward()
            expected.square().sum().backward()
            for (name, p), q in zip(enc.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert cdynamo.stats()["frames_captured"] <= 2
    assert cdynamo.stats()["native_frames"] == []
    d = dynamo_count(make_encoder().train(), [(torch.randn(2, n, 16),) for n in lengths])
    assert cdynamo.stats()["frames_captured"] <= d


def test_inductor_compiles_a_dynamic_kernel():
    def f(x):
        return (x.sin() * 2 + x.shape[0]).sum(dim=-1)

    cf = cdynamo.compile(f, backend="inductor", dynamic=True)
    for n in (3, 7, 12):
        check(cf, f, torch.randn(n, 5))
    assert cdynamo.stats()["frames_captured"] == 1


def test_dynamic_log_channel_says_each_symbol_and_guard(caplog):
    import logging

    cdynamo.set_logs("dynamic")
    try:
        cf = cdynamo.compile(add, backend="eager")
        with caplog.at_level(logging.INFO, logger="cdynamo"):
            cdynamo._logging.log.propagate = True
            cf(torch.randn(3), torch.randn(3))
            cf(torch.randn(4), torch.randn(4))
    finally:
        cdynamo._logging.log.propagate = False
        cdynamo.set_logs("")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "L['x'].size()[0] = 4 is symbol" in text and "(automatic dynamic (was 3))" in text
    assert "shape guard: L['y'].size()[0] == L['x'].size()[0]" in text


def loop_with_breaks(x, y):
    t0, t1 = x + 1, y * 2
    acc = []
    for w1 in [t0, t1]:
        torch._dynamo.graph_break()
        for w2 in [t0, t1]:
            torch._dynamo.graph_break()
            acc.append(w1 * w2)
    return acc


def test_shape_guards_with_input_iterators_whose_items_are_dropped():
    # A resume function inside a loop gets the loop's tuple_iterator; the guards of the items
    # it does not take are dropped, and the shape guards are stated over the registers that
    # stay (this crashed when a shape guard read a dropped register).
    cf = cdynamo.compile(loop_with_breaks, backend="eager")
    for n in (4, 4, 3, 3, 5):
        args = (torch.randn(n), torch.randn(n))
        expected = loop_with_breaks(*args)
        got = cf(*args)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
    assert cdynamo.stats()["native_frames"] == []


def test_transformer_encoder_over_sequence_lengths_with_inductor():
    # End to end through inductor (AOT autograd + a dynamic kernel for the second compile):
    # lengths 8..64, at most 2 compiles (the first static, then symbolic), outputs equal eager.
    enc = make_encoder().eval()
    cenc = cdynamo.compile(enc, backend="inductor")
    with torch.no_grad():
        for n in range(8, 65, 8):
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(cenc(x), enc(x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(cenc(x), enc(x), rtol=1e-4, atol=1e-4)  # a cache hit
    assert 1 <= cdynamo.stats()["frames_captured"] <= 2
    assert cdynamo.stats()["native_frames"] == []
    # torch._dynamo's count on the same lengths (its compiles counted; the backend does not
    # change how many frames it compiles).
    with torch.no_grad():
        d = dynamo_count(enc, [(torch.randn(2, n, 16),) for n in range(8, 65, 8)])
    assert cdynamo.stats()["frames_captured"] <= d


def test_maybe_mark_dynamic_before_the_first_call():
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    x = torch.randn(4, 3)
    cdynamo.maybe_mark_dynamic(x, 0)
    check(cf, add_one, x)
    for n in (5, 9):
        check(cf, add_one, torch.randn(n, 3))
    assert cnt.frame_count == 1
    assert len(sym_placeholders(cnt.graphs[0])) == 1
    y = torch.randn(4, 3)
    torch._dynamo.maybe_mark_dynamic(y, 0)
    assert dynamo_count(add_one, [(y,)] + [(torch.randn(n, 3),) for n in (5, 9)]) == 1
    # torch's own mark is honoured too.
    cdynamo.reset()
    cnt = CompileCounter()
    cf = cdynamo.compile(add_one, backend=cnt)
    z = torch.randn(4, 3)
    torch._dynamo.maybe_mark_dynamic(z, 0)
    check(cf, add_one, z)
    check(cf, add_one, torch.randn(6, 3))
    assert cnt.frame_count == 1


def checked(x):
    torch._check(x.shape[0] >= 3)
    return x * x.shape[0]


def test_torch_check_on_a_symbolic_size_is_a_shape_guard():
    cnt = CompileCounter()
    cf = cdynamo.compile(checked, backend=cnt, dynamic=True)
    for n in (3, 4, 8):
        check(cf, checked, torch.randn(n))
    assert cnt.frame_count == 1 == dynamo_count(checked, [(torch.randn(n),) for n in (3, 4, 8)], dynamic=True)
    assert "shape guard: L['x'].size()[0] >= 3" in cdynamo.cache_entries(checked)[0]["guards"]
    # A size the check rejects: the same error as eager (torch._dynamo raises its own
    # TorchRuntimeError from its compile).
    with pytest.raises(RuntimeError) as eager:
        checked(torch.randn(2))
    with pytest.raises(RuntimeError) as compiled:
        cf(torch.randn(2))
    assert str(compiled.value) == str(eager.value)
    check(cf, checked, torch.randn(5))  # the entry still serves


def test_symbol_the_trace_specializes_has_no_placeholder():
    # x.view(3, 2, 4) of a symbolic 24 makes the size 24: the graph keeps no placeholder for
    # the symbol (torch._dynamo drops it too).
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def f(x):
        return x.clone().view(3, 2, 4) * 2

    cf = cdynamo.compile(f, backend=backend, dynamic=True)
    for n in (24, 24):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), f(x))
    assert len(graphs) == 1 and sym_placeholders(graphs[0]) == []
    ref = torch._dynamo.testing.EagerAndRecordGraphs()
    torch._dynamo.reset()
    torch.compile(f, backend=ref, dynamic=True)(torch.randn(24))
    assert sym_placeholders(ref.graphs[0]) == []
