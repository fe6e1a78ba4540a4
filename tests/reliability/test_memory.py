"""Cache entries, with their graphs and compiled artifacts, die with the function or module
they were made for (no timing or RSS here: benchmarks/soak_memory.py measures those)."""
import gc
import weakref

import pytest
import torch

import cdynamo


class KeepBackend:
    """Returns a callable object per graph and keeps only weak references to what it made."""

    def __init__(self):
        self.artifacts = []
        self.graphs = []

    def __call__(self, gm, example_inputs):
        art = Artifact(gm.forward)
        self.artifacts.append(weakref.ref(art))
        self.graphs.append(weakref.ref(gm))
        return art


class Artifact:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


# Entries live on the code object (co_extra), as TorchDynamo's do: a function defined inside
# another shares its code with every other instance, so each test makes its code with exec.
SOURCE = """
import torch
def f(x):
    y = x * 2
    if y.sum() > 0:  # a graph break: two graphs, break and resume code
        return y + 1
    return y - 1

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()
"""


def fresh(name):
    ns = {}
    exec(compile(SOURCE, "<memory-test>", "exec"), ns)
    return ns[name]


def make_function():
    return fresh("f")


def test_entries_freed_when_the_function_dies():
    backend = KeepBackend()
    f = make_function()
    cf = cdynamo.compile(f, backend=backend)
    cf(torch.ones(3))
    cf(-torch.ones(3))
    alive = [r() is not None for r in backend.artifacts]  # bools: an assert must hold no artifact
    assert len(alive) >= 2 and all(alive)
    assert cdynamo.stats()["cache_entries"] >= 2
    del f, cf
    gc.collect()
    assert all(r() is None for r in backend.artifacts), "compiled artifacts outlive the function"
    assert cdynamo.stats()["cache_entries"] == 0


# The function's code object owns its entries (co_extra), and code objects are not tracked by
# gc: the collection that frees the function and its globals (a cycle) frees the code, and so
# the entries, only while it runs, after it decided what is garbage. The GraphModule the
# entries (and here the backend's artifact) held is a cycle itself (GraphModule <-> Graph
# <-> Nodes), which the next collection frees. torch._dynamo keeps these graph modules alive
# after both collections.
def test_graph_modules_freed_when_the_function_dies():
    backend = KeepBackend()
    cf = cdynamo.compile(make_function(), backend=backend)
    cf(torch.ones(3))
    assert len(backend.graphs) == 2 and all(r() is not None for r in backend.graphs)
    del cf
    gc.collect()
    assert cdynamo.stats()["cache_entries"] == 0
    gc.collect()
    assert all(r() is None for r in backend.graphs), "graph modules outlive the function"


def test_graph_modules_freed_after_reset():
    backend = KeepBackend()
    f = make_function()
    cf = cdynamo.compile(f, backend=backend)
    cf(torch.ones(3))
    assert all(r() is not None for r in backend.graphs)
    cdynamo.reset()
    gc.collect()
    assert all(r() is None for r in backend.graphs), "graph modules outlive reset()"
    assert cf(torch.ones(3)).tolist() == [3.0, 3.0, 3.0] and len(backend.graphs) == 4


# torch.fx keeps every GraphModule's generated source (torch.fx.graph_module._loader and
# linecache, under a fresh "<eval_with_key>.N" name each); cdynamo drops the source of the
# graphs it traced when they die, so compile/reset cycles do not grow without bound.
def test_generated_source_of_dead_graphs_is_dropped():
    import linecache
    import torch.fx.graph_module as fx_gm
    backend = KeepBackend()
    cf = cdynamo.compile(make_function(), backend=backend)
    cf(torch.ones(3))
    keys = [type(r()).forward.__code__.co_filename for r in backend.graphs]
    assert len(keys) == 2 and all(k in fx_gm._loader.eval_cache and k in linecache.cache for k in keys)
    # ...kept while the graph lives: a traceback through its forward shows its lines.
    assert " * 2" in "".join(linecache.getlines(keys[0]))
    del cf
    gc.collect()
    gc.collect()
    assert all(r() is None for r in backend.graphs)
    assert not any(k in fx_gm._loader.eval_cache or k in linecache.cache for k in keys)


def _fx_sources():
    import torch.fx.graph_module as fx_gm
    return set(fx_gm._loader.eval_cache)


# A graph no backend sees (a frame whose trace recorded no op) is built all the same, and its
# source must go with it: a fuzzer run leaked a few such sources per program.
def test_source_of_a_graph_without_ops_is_dropped():
    ns = {}
    exec(compile("def g(x, xs):\n    xs.append(x)\n    return len(xs)\n", "<memory-test>", "exec"), ns)
    counter = cdynamo.testing.CompileCounter()
    cf = cdynamo.compile(ns["g"], backend=counter)
    before = _fx_sources()
    xs = []
    assert cf(torch.ones(2), xs) == 1 and cf(torch.ones(2), xs) == 2 and len(xs) == 2
    assert counter.frame_count == 0 and cdynamo.stats()["frames_captured"] >= 1  # traced, no graph
    gc.collect()
    assert _fx_sources() - before == set()


# The graphs a backend makes from cdynamo's (AOT autograd's joint, forward and backward
# graphs) keep their sources while the entry lives and drop them with it.
def test_sources_of_the_graphs_a_backend_made_go_with_the_entry():
    before = _fx_sources()
    cf = cdynamo.compile(make_function(), backend="aot_eager")
    x = torch.ones(3, requires_grad=True)
    assert torch.equal(cf(x), make_function()(x))
    made = _fx_sources() - before
    assert len(made) > 2  # cdynamo's two graphs and AOT autograd's own
    del cf
    cdynamo.reset()
    gc.collect()
    gc.collect()
    assert _fx_sources() & made == set()


# A module is guarded by its class and the attributes read from it; the class's forward code
# owns the entry (co_extra), so a class held strongly by its guards would never be freed
# (a cycle through C++ that gc cannot see): heap types are held weakly.
def test_entries_freed_when_the_module_dies():
    backend = KeepBackend()

    Net = fresh("Net")
    m = Net()
    mref = weakref.ref(m)
    cm = cdynamo.compile(m, backend=backend)
    cm(torch.randn(2, 4))
    alive = [r() is not None for r in backend.artifacts]
    assert alive and all(alive)
    del m, cm, Net
    gc.collect()
    assert mref() is None, "a cache entry keeps the module alive"
    assert all(r() is None for r in backend.artifacts)
    assert cdynamo.stats()["cache_entries"] == 0


def test_classes_made_at_run_time_die_and_their_guards_fail():
    # A long-lived compiled function called with instances of classes made at run time: the
    # entries' type and class-attribute guards do not keep the classes alive, an entry of a
    # class that died never accepts an instance of a new class (even at its address), and
    # such entries are dropped: more classes than config.recompile_limit all compile.
    backend = KeepBackend()

    def f(x, obj):
        return obj.scale(x) + obj.offset

    cf = cdynamo.compile(f, backend=backend)
    refs = []
    for k in range(cdynamo.config.recompile_limit + 2):
        cls = type("Made", (), {"offset": k, "scale": lambda self, x, k=k: x * (k + 2)})
        obj = cls()
        x = torch.ones(3)
        assert torch.equal(cf(x, obj), f(x, obj))
        assert torch.equal(cf(x, obj), f(x, obj))  # a hit
        refs.append(weakref.ref(cls))
        del cls, obj
        gc.collect()
    assert all(r() is None for r in refs), "a cache entry keeps a class made at run time alive"
    st = cdynamo.stats()
    assert st["cache_hits"] == len(refs) and st["frames_native"] == 0
    assert st["cache_entries"] == 1 and len(backend.artifacts) == len(refs)


def test_reset_frees_entries_of_live_functions():
    backend = KeepBackend()
    f = make_function()
    cf = cdynamo.compile(f, backend=backend)
    cf(torch.ones(3))
    cdynamo.reset()
    gc.collect()
    assert all(r() is None for r in backend.artifacts)
    assert torch.equal(cf(torch.ones(3)), f(torch.ones(3)))  # and compiles again


# The translation history (cdynamo._events.records, up to MAX_RECORDS) is kept across
# reset(): a code translated again shares what did not change with its previous record, so
# compile/reset cycles add little more than the record itself until the history is full.
def test_history_records_of_a_code_compiled_again_share_their_fields():
    from cdynamo import _events
    f = make_function()
    cf = cdynamo.compile(f, backend="eager")
    cf(torch.ones(3))
    first = [r for r in _events.records if r.code.co_name == "f"][-1]
    cdynamo.reset()
    cf(torch.ones(3))
    again = [r for r in _events.records if r.code.co_name == "f"][-1]
    assert again is not first and again.frame_compile_id == first.frame_compile_id + 1
    assert again.guard_sites == first.guard_sites and again.guard_sites is first.guard_sites
    assert again.code is first.code and again.guards is first.guards
    cdynamo.reset()
    cf(torch.ones(2, 2))  # other guards: the unchanged ones are still shared
    other = [r for r in _events.records if r.code.co_name == "f"][-1]
    assert other.guard_sites != first.guard_sites
    shared = [s for s in other.guard_sites if any(s is t for t in first.guard_sites)]
    assert shared and all(s in first.guard_sites for s in shared)
    assert cf(torch.ones(2, 2)).tolist() == [[3.0, 3.0], [3.0, 3.0]]
