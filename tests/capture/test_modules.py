"""nn.Module capture: forward is inlined, parameters and buffers become graph inputs."""
import pytest
import torch
import torch._dynamo.testing
from torch import nn

import cdynamo
from cdynamo.testing import CompileCounter


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.norm(self.drop(self.act(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU(),
        )
        self.head = nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        y = self.features(x)
        return self.head(torch.flatten(y, 1))


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.proj = nn.Linear(6, 6, bias=False)

    def forward(self, ids):
        return self.proj(self.emb(ids)).sum(dim=1)


def make_inputs(model):
    torch.manual_seed(0)
    if isinstance(model, CNN):
        return (torch.randn(2, 3, 7, 7),)
    if isinstance(model, Embedder):
        return (torch.randint(0, 10, (2, 5)),)
    return (torch.randn(3, 16),)


def counting(backend):
    """A CompileCounter that then hands the graph to a named backend."""
    from torch._dynamo.backends.registry import lookup_backend

    cnt = CompileCounter()
    inner = lookup_backend(backend)

    def be(gm, example_inputs):
        cnt(gm, example_inputs)
        return inner(gm, example_inputs)

    return cnt, be


BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model_cls", [MLP, CNN], ids=["mlp", "cnn"])
def test_module_captures_one_graph(model_cls, backend):
    torch.manual_seed(0)
    model = model_cls().eval()
    cnt, be = counting(backend)
    cm = cdynamo.compile(model, backend=be)
    for _ in range(2):
        (x,) = make_inputs(model)
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-5)
    assert cnt.frame_count == 1
    s = cdynamo.stats()
    assert s["frames_native"] == 0 and s["cache_hits"] == 1
    # Same graph size as TorchDynamo (inline_inbuilt_nn_modules): every layer is one op or more.
    ref = torch._dynamo.testing.CompileCounter()
    torch.compile(model, backend=ref)(*make_inputs(model))
    assert ref.frame_count == 1
    assert cnt.op_count == ref.op_count


def test_training_mode_dropout_and_batchnorm_are_captured():
    torch.manual_seed(0)
    model = CNN().train()
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(2, 3, 7, 7)
    ref_model = CNN().train()
    ref_model.load_state_dict(model.state_dict())
    torch.testing.assert_close(cm(x), ref_model(x))
    # BatchNorm in training mode updates running stats inside the graph, like eager.
    torch.testing.assert_close(model.features[1].running_mean, ref_model.features[1].running_mean)
    assert cnt.frame_count == 1
    model.eval()
    ref_model.eval()
    torch.testing.assert_close(cm(x), ref_model(x))
    assert cnt.frame_count == 2, "self.training is guarded"


def test_embedding_module():
    torch.manual_seed(0)
    model = Embedder()
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    for _ in range(2):
        (ids,) = make_inputs(model)
        torch.testing.assert_close(cm(ids), model(ids))
    assert cnt.frame_count == 1


def test_optimized_module_keeps_the_original():
    model = MLP()
    cm = cdynamo.compile(model, backend="eager")
    assert isinstance(cm, cdynamo.OptimizedModule)
    assert cm._orig_mod is model
    assert cm.fc1 is model.fc1
    assert [p for p in cm.parameters()] == [p for p in model.parameters()]
    sd = cm.state_dict()
    assert set(sd) == {"_orig_mod." + k for k in model.state_dict()}
    # torch.compile's OptimizedModule names its state the same way.
    assert set(sd) == set(torch.compile(model, backend="eager").state_dict())


def test_optimized_module_attribute_writes_reach_the_original():
    """Writes, deletes, `training` and dir() act on the wrapped module, as with torch.compile's
    wrapper; the compiled forward then sees the new values (a changed int recompiles)."""
    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.step = 1

        def forward(self, x):
            return self.lin(x) + self.step

    torch.manual_seed(0)
    model = Step()
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(2, 4)
    torch.testing.assert_close(cm(x), model(x))
    cm.step += 1
    assert model.step == 2 and "step" not in cm.__dict__
    torch.testing.assert_close(cm(x), model(x))
    assert cnt.frame_count == 2
    cm.extra = torch.ones(1)
    assert torch.equal(model.extra, torch.ones(1))
    del cm.extra
    assert not hasattr(model, "extra")
    cm.eval()
    assert not model.training and not cm.training and not model.lin.training
    cm.train()
    assert model.training and cm.training
    names = dir(cm)
    assert {"lin", "step", "forward", "_orig_mod"} <= set(names)
    assert set(dir(model)) <= set(names)
    # torch.compile's wrapper behaves the same way
    tm = torch.compile(Step(), backend="eager")
    tm.step += 1
    assert tm._orig_mod.step == 2 and "step" not in tm.__dict__


def test_optimized_module_survives_save_and_copy(tmp_path):
    import copy
    torch.manual_seed(0)
    model = MLP().eval()  # no dropout: the copies must compute the same values
    cm = cdynamo.compile(model, backend="eager")
    (x,) = make_inputs(model)
    ref = model(x)
    torch.save(cm, tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    for other in (loaded, copy.deepcopy(cm)):
        assert isinstance(other, cdynamo.OptimizedModule)
        torch.testing.assert_close(other(x), ref)
        assert set(other.state_dict()) == set(cm.state_dict())


def test_replacing_a_submodule_recompiles():
    torch.manual_seed(0)
    model = MLP().eval()
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(3, 16)
    cm(x)
    model.act = nn.ReLU()
    torch.testing.assert_close(cm(x), model(x))
    assert cnt.frame_count == 2


def test_parameter_update_is_seen_without_recompile():
    model = nn.Linear(4, 4)
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(2, 4)
    cm(x)
    with torch.no_grad():
        model.weight.mul_(2)
    torch.testing.assert_close(cm(x), model(x))
    model.weight = nn.Parameter(torch.randn(4, 4))  # a new tensor of the same shape: read live
    torch.testing.assert_close(cm(x), model(x))
    assert cnt.frame_count == 1


def test_forward_hook_added_after_compile_is_honoured():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(2, 4)
    cm(x)
    model[0].register_forward_hook(lambda mod, inp, out: out * 0)
    torch.testing.assert_close(cm(x), model(x))
    assert (cm(x) == 0).all()


def test_module_state_changes_after_many_hits_are_seen():
    # The guards remember dict lookups by the dicts' version tags; after a warm run of hits,
    # every kind of change to the module tree must still be seen on the next call.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.ReLU())
    cnt = CompileCounter()
    cm = cdynamo.compile(model, backend=cnt)
    x = torch.randn(2, 4)

    def hits(n=5):
        for _ in range(n):
            torch.testing.assert_close(cm(x), model(x))

    hits()
    assert cnt.frame_count == 1
    model[0].weight = nn.Parameter(torch.randn(4, 4))  # same metadata: read live, no recompile
    hits()
    assert cnt.frame_count == 1
    model[0]._parameters["weight"] = nn.Parameter(torch.randn(4, 4), requires_grad=False)  # into the dict
    hits()
    assert cnt.frame_count == 2
    model[0].weight.requires_grad_(True)  # metadata changed in place: no dict changes at all
    hits()
    assert cnt.frame_count == 2  # the first entry (requires_grad=True) matches again
    model[1].eps = 0.5  # a constant read in the trace
    hits()
    handle = model[2].register_forward_hook(lambda mod, inp, out: out + 100)
    hits()
    assert (cm(x) >= 100).all()
    handle.remove()
    hits()
    model[2] = nn.Tanh()  # another module in the same slot
    hits()
    assert (cm(x).abs() < 1).all()
    assert cnt.frame_count >= 4


def test_compiled_module_survives_pickling():
    # torch.save of a compiled module (as torch.compile's can be saved): the wrapper, its
    # configuration and its backend pickle; the loaded copy computes the same and compiles.
    import io

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    counter = CompileCounter()
    compiled = cdynamo.compile(model, backend=counter)
    x = torch.randn(2, 3)
    expected = model(x)
    torch.testing.assert_close(compiled(x), expected)
    buf = io.BytesIO()
    torch.save(compiled, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    torch.testing.assert_close(loaded(x), expected)
    assert counter.frame_count >= 1
