"""Guards: every input property the trace depended on is checked before an entry runs."""
import torch
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


def compiled(fn):
    cnt = CompileCounter()
    return cdynamo.compile(fn, backend=cnt), cnt


def test_tensor_properties_recompile():
    cf, cnt = compiled(lambda x: x * 2)
    base = torch.randn(2, 3)
    variants = [
        base,
        base.double(),                        # dtype
        torch.randn(2, 3, requires_grad=True),  # requires_grad
        torch.randn(3, 2).t(),                # strides
        torch.randn(2, 4),                    # sizes
        nn.Parameter(torch.randn(2, 3)),      # type
    ]
    for i, v in enumerate(variants):
        torch.testing.assert_close(cf(v), v * 2)
        assert cnt.frame_count == i + 1, f"variant {i} must recompile"
    for v in variants:  # every variant now hits its own entry
        cf(v)
    assert cnt.frame_count == len(variants)


def test_tensor_dispatch_keys_recompile(caplog):
    # Same dtype, shape, strides and device, different dispatch keys: an inference tensor,
    # a conjugate view. Checked as torch._dynamo's TENSOR_MATCH does.
    import logging

    cf, cnt = compiled(lambda x: x * 2)
    x = torch.randn(2, 3)
    cf(x)
    with torch.inference_mode():
        xi = torch.randn(2, 3)
    cdynamo.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="cdynamo"):
            cdynamo._logging.log.propagate = True
            torch.testing.assert_close(cf(xi), xi * 2)
    finally:
        cdynamo._logging.log.propagate = False
        cdynamo.set_logs("")
    assert cnt.frame_count == 2
    assert "dispatch keys of L['x']: expected" in "\n".join(r.getMessage() for r in caplog.records)
    cf(x), cf(xi)
    assert cnt.frame_count == 2

    cc, cnt = compiled(lambda x: x * 2)
    c = torch.randn(2, 3, dtype=torch.complex64)
    cc(c)
    torch.testing.assert_close(cc(c.conj()), c.conj() * 2)
    assert cnt.frame_count == 2


def test_tensor_without_strides_is_not_a_crash():
    cf, cnt = compiled(lambda x: x * 2)
    s = torch.eye(3).to_sparse()
    torch.testing.assert_close(cf(s).to_dense(), torch.eye(3) * 2)
    torch.testing.assert_close(cf(s).to_dense(), torch.eye(3) * 2)


def test_guard_failure_reasons_are_readable():
    cf, cnt = compiled(lambda x, k: x * k)
    x = torch.randn(2, 3)
    cf(x, 2)
    (entry,) = cdynamo.cache_entries(cf)
    text = entry["guards"]
    assert "L['x'] matches Tensor(dtype=torch.float32, device=cpu, size=[2, 3], stride=[3, 1]" in text
    assert "L['k'] == 2" in text
    assert "torch.is_grad_enabled() == True" in text


GLOBAL_SCALE = 2.0


def scale_by_global(x):
    return x * GLOBAL_SCALE


def test_global_constant_is_guarded():
    global GLOBAL_SCALE
    cf, cnt = compiled(scale_by_global)
    x = torch.randn(3)
    try:
        torch.testing.assert_close(cf(x), x * 2.0)
        GLOBAL_SCALE = 5.0
        torch.testing.assert_close(cf(x), x * 5.0)
        assert cnt.frame_count == 2
    finally:
        GLOBAL_SCALE = 2.0


def activation(x):
    return x.relu()


def uses_global_function(x):
    return activation(x) + 1


def test_global_function_identity_is_guarded():
    global activation
    cf, cnt = compiled(uses_global_function)
    x = torch.randn(4)
    saved = activation
    try:
        torch.testing.assert_close(cf(x), x.relu() + 1)
        activation = torch.tanh
        torch.testing.assert_close(cf(x), torch.tanh(x) + 1)
        assert cnt.frame_count == 2
    finally:
        activation = saved


def scaled_by_defaults(x, cfg={"k": 2}, extra=[1], *, shift={"s": 0.5}):  # noqa: B006 - mutated below
    return x * cfg["k"] + len(extra) + shift["s"]


def calls_with_defaults(x):
    return scaled_by_defaults(x)


def test_defaults_of_an_inlined_function_are_guarded():
    # A mutable default changed between calls, or the defaults replaced: the entry must not
    # keep the values the first trace saw.
    cf, cnt = compiled(calls_with_defaults)
    x = torch.randn(3)
    saved = scaled_by_defaults.__defaults__, scaled_by_defaults.__kwdefaults__
    try:
        for change in (lambda: None,
                       lambda: scaled_by_defaults.__defaults__[0].__setitem__("k", 5),
                       lambda: scaled_by_defaults.__defaults__[1].append(7),
                       lambda: scaled_by_defaults.__kwdefaults__["shift"].__setitem__("s", 2.0),
                       lambda: setattr(scaled_by_defaults, "__defaults__", ({"k": 10}, [])),
                       lambda: setattr(scaled_by_defaults, "__defaults__", (None, {"k": 3}, [1, 2]))):
            change()
            expected = calls_with_defaults(x)
            torch.testing.assert_close(cf(x), expected)
            torch.testing.assert_close(cf(x), expected)  # and its hit
        assert cnt.frame_count == 6
    finally:
        scaled_by_defaults.__defaults__, scaled_by_defaults.__kwdefaults__ = saved


class WithMethodDefaults(nn.Module):
    def scale(self, x, cfg={"k": 2}):  # noqa: B006 - mutated below
        return x * cfg["k"]

    def forward(self, x):
        return self.scale(x)


class Counted:
    def bump(self, x, seen={}):  # noqa: B006 - the cache idiom: a default kept between calls
        seen["n"] = seen.get("n", 0) + 1
        return x * seen["n"]


def test_defaults_of_a_method_are_guarded_and_kept_between_calls():
    m = WithMethodDefaults()
    cm = cdynamo.compile(m, backend=CompileCounter())
    x = torch.randn(3)
    saved = WithMethodDefaults.scale.__defaults__
    try:
        torch.testing.assert_close(cm(x), m(x))
        WithMethodDefaults.scale.__defaults__[0]["k"] = 5
        torch.testing.assert_close(cm(x), m(x))
        WithMethodDefaults.scale.__defaults__ = ({"k": 7},)
        torch.testing.assert_close(cm(x), m(x))
    finally:
        WithMethodDefaults.scale.__defaults__ = saved

    # A default the method changes: each compiled call changes it as the eager call does.
    def run(x, obj):
        return obj.bump(x)

    cf, cnt = compiled(run)
    obj = Counted()
    got = [cf(x, obj) for _ in range(3)]
    assert Counted.bump.__defaults__[0]["n"] == 3
    for i, g in enumerate(got):
        torch.testing.assert_close(g, x * (i + 1))


def test_a_function_made_again_each_call_hits_across_a_break():
    # The function made before the break is a new object on every call: the resume
    # function's entry is guarded by its code, not its identity, and the defaults it
    # runs with are guarded through it.
    def f(x, k):
        g = lambda a, b=k: a * b  # noqa: E731
        y = x + 1
        torch._dynamo.graph_break()
        return g(y)

    cf, cnt = compiled(f)
    x = torch.randn(3)
    for k in (2, 2, 2, 3, 3):
        torch.testing.assert_close(cf(x, k), f(x, k))
    st = cdynamo.stats()
    assert cnt.frame_count <= 4, cnt.frame_count  # frame + resume, then k=3 once more each
    assert st["frames_native"] == 0


def test_is_between_functions_passed_in_is_guarded():
    # A function argument is guarded by its code; `is` against another function depends on
    # its identity, so another function of the same code takes the other branch.
    import types

    def f(x, fn):
        return x + 1 if fn is activation else x - 1

    cf, cnt = compiled(f)
    x = torch.randn(3)
    clone = types.FunctionType(activation.__code__, globals())
    for fn in (activation, clone, activation, clone):
        torch.testing.assert_close(cf(x, fn), f(x, fn))
    assert cnt.frame_count == 2


def test_closure_variable_is_guarded():
    factor = 3

    def f(x):
        return x * factor

    cf, cnt = compiled(f)
    x = torch.randn(2)
    torch.testing.assert_close(cf(x), x * 3)
    factor = 4  # noqa: F841 - rebinding the cell the closure reads
    torch.testing.assert_close(cf(x), x * 4)
    assert cnt.frame_count == 2


def test_module_attribute_constant_is_guarded():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2

        def forward(self, x):
            return x * self.k

    m = Scaled()
    cm = cdynamo.compile(m, backend=(cnt := CompileCounter()))
    x = torch.randn(2)
    torch.testing.assert_close(cm(x), x * 2)
    m.k = 7
    torch.testing.assert_close(cm(x), x * 7)
    assert cnt.frame_count == 2


def test_another_module_instance_recompiles_and_gives_its_own_result():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    cnt = CompileCounter()
    ca, cb = cdynamo.compile(a, backend=cnt), cdynamo.compile(b, backend=cnt)
    x = torch.randn(1, 3)
    torch.testing.assert_close(ca(x), a(x))
    torch.testing.assert_close(cb(x), b(x))
    torch.testing.assert_close(ca(x), a(x))


def test_dead_module_does_not_match_and_is_not_kept_alive():
    import gc
    import weakref

    cnt = CompileCounter()
    m = nn.Linear(2, 2)
    ref = weakref.ref(m)
    cdynamo.compile(m, backend=cnt)(torch.randn(1, 2))
    del m
    gc.collect()
    assert ref() is None, "a cache entry must not keep the model alive"
    m2 = nn.Linear(2, 2)
    torch.testing.assert_close(cdynamo.compile(m2, backend=cnt)(torch.ones(1, 2)), m2(torch.ones(1, 2)))


def test_list_argument_structure_is_guarded():
    def f(xs):
        return xs[0] + xs[1]

    cf, cnt = compiled(f)
    a, b, c = torch.randn(2), torch.randn(2), torch.randn(2)
    torch.testing.assert_close(cf([a, b]), a + b)
    torch.testing.assert_close(cf([a, b, c]), a + b)  # length changed
    torch.testing.assert_close(cf((a, c)), a + c)     # tuple instead of list
    assert cnt.frame_count == 3


def test_shared_parameters_are_deduplicated_and_aliasing_is_guarded():
    class Tied(nn.Module):
        def __init__(self, tie):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.b = nn.Linear(3, 3, bias=False)
            if tie:
                self.b.weight = self.a.weight

        def forward(self, x):
            # parameters() yields a shared weight once (it keeps a set of seen tensors).
            return x * sum(p.sum() for p in self.parameters())

    cnt = CompileCounter()
    x = torch.ones(3)
    tied, untied = Tied(True), Tied(False)
    for m in (tied, untied, tied, untied):
        torch.testing.assert_close(cdynamo.compile(m, backend=cnt)(x), m(x))
    assert cnt.frame_count == 2  # one entry per aliasing pattern
    assert any(" is not " in e["guards"] for e in cdynamo.cache_entries(Tied.forward))


def _reads_environment(x):
    import os

    if os.environ.get("CDYNAMO_TEST_FLAG") == "1":
        x = x + 1
    if "CDYNAMO_TEST_MODE" in os.environ:
        x = x * int(os.environ["CDYNAMO_TEST_MODE"])
    return x - len(os.getenv("CDYNAMO_TEST_NAME", ""))


def test_environment_variables_are_guarded_one_by_one(monkeypatch):
    # Each variable the trace read is guarded by itself: changing one of them recompiles,
    # and any other variable of the process (set later by a backend, a library, the user)
    # does not reject the entry. Reading os.environ's whole dict used to guard every
    # variable: llama under inductor ran its first call natively ("guards reject the frame
    # they were built from") because inductor's compile sets variables.
    for name in ("CDYNAMO_TEST_FLAG", "CDYNAMO_TEST_MODE", "CDYNAMO_TEST_NAME", "CDYNAMO_TEST_OTHER"):
        monkeypatch.delenv(name, raising=False)
    cf, cnt = compiled(_reads_environment)
    x = torch.ones(3)

    def check():
        torch.testing.assert_close(cf(x), _reads_environment(x))

    check()
    assert cnt.frame_count == 1
    monkeypatch.setenv("CDYNAMO_TEST_OTHER", "anything")  # not read by the function
    check()
    assert cnt.frame_count == 1
    monkeypatch.setenv("CDYNAMO_TEST_FLAG", "1")
    check()
    assert cnt.frame_count == 2
    monkeypatch.setenv("CDYNAMO_TEST_MODE", "3")
    check()
    monkeypatch.setenv("CDYNAMO_TEST_MODE", "4")
    check()
    monkeypatch.setenv("CDYNAMO_TEST_NAME", "abc")
    check()
    assert cnt.frame_count == 5
    monkeypatch.delenv("CDYNAMO_TEST_FLAG")
    check()
    assert cnt.frame_count == 6
    monkeypatch.setenv("CDYNAMO_TEST_OTHER", "changed")
    check()
    assert cnt.frame_count == 6
    assert cdynamo.stats()["frames_native"] == 0


def test_a_variable_read_and_missing_raises_key_error_as_eagerly(monkeypatch):
    import os

    monkeypatch.delenv("CDYNAMO_TEST_MISSING", raising=False)

    def f(x):
        try:
            return x + len(os.environ["CDYNAMO_TEST_MISSING"])
        except KeyError as e:
            return x - len(e.args[0])

    cf, cnt = compiled(f)
    x = torch.zeros(2)
    torch.testing.assert_close(cf(x), f(x))
    monkeypatch.setenv("CDYNAMO_TEST_MISSING", "xy")
    torch.testing.assert_close(cf(x), f(x))
    assert cnt.frame_count == 2


def _ones_like_default(x):
    return x + torch.ones(2), torch.tensor([1.5]), torch.arange(2) * 0.5


def test_default_dtype_is_guarded():
    # The default dtype is baked into the graph (factories without a dtype, int tensor
    # times a float scalar): a call under another default dtype must not run this entry.
    cf, cnt = compiled(_ones_like_default)
    x = torch.zeros(2, dtype=torch.float64)
    prev = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            got, want = cf(x), _ones_like_default(x)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype, (dtype, g.dtype, w.dtype)
                torch.testing.assert_close(g, w)
    finally:
        torch.set_default_dtype(prev)
    assert cnt.frame_count == 2  # one entry per default dtype, each hit on its second call


def _sets_default_dtype(x):
    torch.set_default_dtype(torch.float64)
    y = x + torch.ones(2)
    torch.set_default_dtype(torch.float32)
    return y


def test_a_frame_setting_the_default_dtype_hits_under_the_dtype_it_started_with():
    cf, cnt = compiled(_sets_default_dtype)
    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        x = torch.zeros(2)
        for _ in range(3):
            out = cf(x)
            assert out.dtype == _sets_default_dtype(x).dtype
            assert torch.get_default_dtype() == torch.float32
    finally:
        torch.set_default_dtype(prev)
    assert cnt.frame_count == 1
