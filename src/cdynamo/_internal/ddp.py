"""Graphs traced inside a DistributedDataParallel forward, split at DDP's bucket boundaries.

DDP all-reduces gradients bucket by bucket, each bucket starting as soon as autograd has made
all of its gradients. A compiled forward is one graph, so its backward is one autograd node
that makes every gradient at its very end: no all-reduce could start before the whole
backward is done. With torch._dynamo.config.optimize_ddp (True or "ddp_optimizer", torch's
default), a graph compiled while a DDP module runs its forward
(``DistributedDataParallel._get_active_ddp_module()``; the DDP wrapper's own frames run
natively and the wrapped module's forward is traced) is cut into pieces whose parameters
fill about one bucket each, as torch._dynamo's DDPOptimizer cuts it, and each piece is
compiled by the backend on its own: the backward then runs piece by piece, last piece first,
and each piece's gradients reach DDP's hooks as soon as it is done.

How pieces are made: the graph's call nodes are walked from the output backwards, adding the
bytes of each parameter a node takes as a direct argument (a placeholder whose fake is an
``nn.Parameter`` that requires grad and that DDP does not ignore) to the current piece. Once
the piece holds ``bucket_bytes_cap`` bytes (the first piece, which DDP all-reduces first:
``first_bucket_cap``, c10d's default first bucket size), the next node starts a new piece, but
only once some value made in the current piece is used outside it (a piece that gives nothing
to the rest of the program cannot stand alone). A leading piece without parameters joins the
next one. One piece: the graph is compiled whole.

Each piece is compiled with fake inputs: the graph's own placeholder fakes, propagated
through the pieces before it in the trace's fake mode. A piece always returns a tuple (the
backends' convention); the split module unpacks the one-value pieces again.
"""
import sys

import torch
import torch.fx


def _mode():
    import torch._dynamo.config as dcfg

    value = dcfg.optimize_ddp
    if isinstance(value, bool):
        return "ddp_optimizer" if value else "no_optimization"
    return str(value)


def active_module():
    """The DDP module whose forward is running, when its graphs are to be split (else None)."""
    parallel = sys.modules.get("torch.nn.parallel.distributed")
    if parallel is None:
        return None
    ddp = parallel.DistributedDataParallel._get_active_ddp_module()
    if ddp is None or _mode() != "ddp_optimizer":
        return None
    return ddp


def _param_bytes(node):
    """(id, bytes) of each parameter `node` takes directly as a positional argument."""
    out = []
    for arg in node.args:
        if not isinstance(arg, torch.fx.Node) or arg.op != "placeholder":
            continue
        fake = arg.meta.get("example_value")
        if (isinstance(fake, torch.nn.Parameter) and fake.requires_grad
                and not getattr(fake, "_ddp_ignored", False)):
            out.append((id(arg), fake.untyped_storage().nbytes()))
    return out


def pieces(gm, bucket_bytes_cap, first_bucket_cap):
    """The call nodes of `gm` in pieces, first piece first (see the module docstring)."""
    current = {"nodes": [], "bytes": 0, "params": set()}
    done = []  # pieces closed so far, last piece first
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        cap = first_bucket_cap if not done else bucket_bytes_cap
        if current["bytes"] >= cap and _gives_outside(current["nodes"]):
            done.append(current)
            current = {"nodes": [], "bytes": 0, "params": set()}
        for key, size in _param_bytes(node):
            if key not in current["params"]:
                current["params"].add(key)
                current["bytes"] += size
        current["nodes"].append(node)
    done.append(current)
    done.reverse()
    if len(done) > 1 and done[0]["bytes"] == 0:
        done[1]["nodes"].extend(done[0]["nodes"])
        del done[0]
    return [p["nodes"] for p in done]


def _gives_outside(nodes):
    inside = set(nodes)
    return any(user not in inside for n in nodes for user in n.users)


class _Piece(torch.nn.Module):
    """A compiled piece in the split module; unpacks a piece of one value."""

    def __init__(self, compiled, single):
        super().__init__()
        self.compiled = compiled
        self.single = single

    def forward(self, *args):
        out = self.compiled(*args)
        return out[0] if self.single else out


def split_and_compile(backend, gm, example_inputs, ddp):
    """What the backend's compile of a graph traced in DDP's forward returns (see the module
    docstring): `gm` compiled whole, or a module running its compiled pieces in order."""
    import torch.distributed as dist
    from torch._guards import detect_fake_mode
    from torch.fx.passes.split_module import split_module

    bucket_cap = int(ddp.bucket_bytes_cap)
    first_cap = min(int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", bucket_cap)), bucket_cap)
    parts = pieces(gm, bucket_cap, first_cap)
    if len(parts) <= 1:
        return backend(gm, example_inputs)
    where = {n: i for i, part in enumerate(parts) for n in part}
    split = split_module(gm, None, lambda n: where[n], keep_original_order=True)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [n.meta.get("example_value") for n in placeholders]
    fake_mode = detect_fake_mode(fakes) or detect_fake_mode(example_inputs)
    if fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode()
    fakes = [f if f is not None else (fake_mode.from_tensor(x) if isinstance(x, torch.Tensor) else x)
             for f, x in zip(fakes, example_inputs)]

    class Compiler(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            assert not kwargs
            sub = self.fetch_attr(target)
            single = _returns_one(sub)
            sub.meta.update(gm.meta)  # what the frame's graph tells its backend, each piece tells it too
            compiled = backend(sub, list(args))
            with fake_mode:
                out = sub(*args)
            setattr(split, target, _Piece(compiled, single))
            return out[0] if single else out

    with fake_mode:
        Compiler(split).run(*fakes)
    split.recompile()
    return split


def _returns_one(sub):
    """Makes submodule `sub` return a tuple; whether it returned one value before."""
    output = next(n for n in sub.graph.nodes if n.op == "output")
    value = output.args[0]
    if isinstance(value, (tuple, list)):
        return False
    output.args = ((value,),)
    sub.recompile()
    return True
