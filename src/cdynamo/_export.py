"""Strict torch.export with the graph captured by cdynamo.

torch's strict export (torch.export.export(..., strict=True)) runs in two steps: a graph
capture (``torch.export._trace._export_to_torch_ir``, torch._dynamo in torch) that gives a
torch-level GraphModule, then AOT export of that module to the ATen graph, the graph
signature and the range constraints. cdynamo replaces the first step only, so what torch.export
makes of the graph (signature, constants, range constraints, serialization) is torch's own:

* the module (or function) is compiled with fullgraph=True by a backend that keeps the
  graph and its example inputs and returns stand-ins for the graph's outputs, then called once
  on the example inputs: the value it returns is the program's return value with a stand-in
  where each graph output goes, the input objects where it returns inputs, and its constants;
* the torch-level module has one placeholder per flattened user input (pytree order of
  (args, kwargs), as torch's ``in_spec``), a ``get_attr`` for each parameter, buffer or constant
  tensor the graph reads (found by identity among the module's), ``aten.sym_size`` for each
  size symbol the graph took as an input, and the graph's nodes, meta included; its code
  generator is a ``_PyTreeCodeGen`` over the program's in_spec and out_spec;
* the dims the dynamic_shapes spec names are symbols of the capture's ShapeEnv with the spec's
  ranges as constraints (``symbolic_shapes.export_dims``); the guards the trace made are then
  checked against them by the ShapeEnv's ``produce_guards``, which raises the same
  ConstraintViolationError torch's capture raises (a branch on a size the range does not
  decide, two Dims the program needs equal);
* what cdynamo cannot capture raises ``cdynamo.exc.ExportUnsupported``, naming the reason and
  the line: a ``cdynamo.Unsupported`` that is also torch._dynamo's ``Unsupported``, which code
  written for torch.export catches.

What this capture does not model yet is handed back to torch._dynamo's capture with a
RuntimeWarning naming it: retracing a GraphModule, preserve_module_call_signature, derived
Dims, dynamic int inputs.
"""
import contextlib
import inspect
import warnings

import torch
import torch.utils._pytree as pytree

from . import eval_frame as _ef
from ._internal import symbolic_shapes as _shapes
from .exc import Unsupported


class _Out:
    """Where graph output `index` goes in the returned value."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return f"<graph output {self.index}>"


class _Capture:
    """The export backend: keeps the graph and its example inputs; the callable it returns
    gives stand-ins instead of running the graph (export needs the graph, not its values)."""

    __name__ = "cdynamo_export"

    def __init__(self):
        self.gm = None
        self.example_inputs = None

    def __call__(self, gm, example_inputs):
        if self.gm is not None:
            raise Unsupported("export: the program compiled more than one graph")
        self.gm = gm
        self.example_inputs = list(example_inputs)
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        count = len(outputs) if isinstance(outputs, (tuple, list)) else 1
        stand_ins = [_Out(i) for i in range(count)]

        def stand_in(*args):
            return list(stand_ins)

        return stand_in


def _fallback_reason(f, constraints, flat_inputs, preserve_module_call_signature):
    from torch.export.dynamic_shapes import _Constraint, _DerivedConstraint, _RelaxedConstraint

    if isinstance(f, torch.fx.GraphModule):
        return "retracing a GraphModule"
    if preserve_module_call_signature:
        return "preserve_module_call_signature"
    tensor_ids = {id(x) for x in flat_inputs if isinstance(x, torch.Tensor)}
    for c in constraints or ():
        if isinstance(c, _DerivedConstraint):
            return f"the derived Dim {c.name}"
        if not isinstance(c, (_Constraint, _RelaxedConstraint)):
            return f"the constraint {type(c).__name__}"
        if c.t_id not in tensor_ids:
            return "a dynamic int input"
    return None


def _dims_from_constraints(constraints, every_dim_of=()):
    """symbolic_shapes.export_dims for the spec's constraints (see there); the tensors of
    `every_dim_of` have every other dim symbolic too (duck-sized, unconstrained: the
    automatic dims of torch._dynamo.export's assume_static_by_default=False)."""
    from torch.export.dynamic_shapes import _Constraint
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StrictMinMaxConstraint

    uses = {}
    for c in constraints or ():
        if isinstance(c, _Constraint):
            uses[c.name] = uses.get(c.name, 0) + 1
    dims = {}
    for c in constraints or ():
        if isinstance(c, _Constraint):
            kind = DimDynamic.DUCK if uses[c.name] > 1 else DimDynamic.DYNAMIC
            vr = c.constraint_range.vr
            constraint = StrictMinMaxConstraint(vr=vr, warn_only=False)
        else:  # Dim.AUTO / Dim.DYNAMIC: symbolic, its range and relations inferred
            kind, constraint = DimDynamic.DYNAMIC, None
        dims.setdefault(c.t_id, {})[c.dim] = (kind, constraint, getattr(c, "name", None))
    for t in every_dim_of:
        if isinstance(t, torch.Tensor):
            spec = dims.setdefault(id(t), {})
            for d in range(t.dim()):
                spec.setdefault(d, (DimDynamic.DUCK, None, None))
    return dims


@contextlib.contextmanager
def _marked(flat_inputs, dims):
    """Puts torch._dynamo's dynamic marks on the inputs the spec names (the trace then has a
    ShapeEnv and asks symbolic_shapes for their fakes) and takes them off after."""
    saved = []
    for x in flat_inputs:
        if isinstance(x, torch.Tensor) and id(x) in dims:
            had = x.__dict__.get("_dynamo_dynamic_indices", _MISSING)
            saved.append((x, had))
            x._dynamo_dynamic_indices = set(dims[id(x)]) | (set() if had is _MISSING else set(had))
    prev, _shapes.export_dims.dims = _shapes.export_dims.dims, dims
    try:
        yield
    finally:
        _shapes.export_dims.dims = prev
        for x, had in saved:
            if had is _MISSING:
                x.__dict__.pop("_dynamo_dynamic_indices", None)
            else:
                x._dynamo_dynamic_indices = had


_MISSING = object()


def _input_names(f, args, kwargs, in_spec):
    """The source names of the flattened inputs, in the program's words (L['x'], L['xs'][0]),
    for constraint messages."""
    try:
        fn = f.forward if isinstance(f, torch.nn.Module) else f
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
        names = []
        for name, value in bound.arguments.items():
            param = sig.parameters[name]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                leaves = pytree.tree_flatten_with_path(tuple(value))[0]
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                leaves = pytree.tree_flatten_with_path(dict(value))[0]
            else:
                leaves = pytree.tree_flatten_with_path(value)[0]
            names.extend(f"L[{name!r}]{pytree.keystr(path)}" for path, _ in leaves)
        if len(names) == in_spec.num_leaves:
            return names
    except (TypeError, ValueError):
        pass
    return [f"L['flat_args'][{i}]" for i in range(in_spec.num_leaves)]


def _check_constraints(fake_mode, fakes, names, dims, flat_inputs):
    """Raises ConstraintViolationError where the trace's shape guards narrow what the spec
    allows (the ShapeEnv's produce_guards with the spec's constraints)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    if fake_mode is None or fake_mode.shape_env is None:
        return
    placeholders, sources, contexts = [], [], []
    for i, x in enumerate(flat_inputs):
        fake = fakes.get(i)
        if fake is None:
            continue
        spec = dims.get(id(x), {})
        kinds = [spec[d][0] if d in spec else DimDynamic.STATIC for d in range(x.dim())]
        constraints = [spec[d][1] if d in spec else None for d in range(x.dim())]
        for d, (_, _, dim_name) in spec.items():
            if dim_name is not None:  # messages name the Dim, as torch's do
                fake_mode.shape_env.source_name_to_debug_name[f"{names[i]}.size()[{d}]"] = dim_name
        placeholders.append(fake)
        sources.append(ConstantSource(names[i]))
        contexts.append(StatelessSymbolicContext(dynamic_sizes=kinds, constraint_sizes=constraints))
    # Dims of one Dim are one quantity; dims with Dim.AUTO/DYNAMIC may be related to anything.
    from torch._dynamo.source import TensorProperty, TensorPropertySource
    from torch.fx.experimental.symbolic_shapes import EqualityConstraint

    first, pairs, relaxed = {}, [], set()
    for i, x in enumerate(flat_inputs):
        if i not in fakes:
            continue
        for d, (_, _, dim_name) in sorted(dims.get(id(x), {}).items()):
            src = TensorPropertySource(ConstantSource(names[i]), TensorProperty.SIZE, d)
            if dim_name is None:
                relaxed.add(src)
            elif dim_name in first:
                pairs.append((first[dim_name], src))
            else:
                first[dim_name] = src
    equalities = EqualityConstraint(warn_only=False, source_pairs=pairs, derived_equalities=[], phantom_symbols=[],
                                    relaxed_sources=relaxed)
    if placeholders:
        fake_mode.shape_env.produce_guards(placeholders, sources, input_contexts=contexts,
                                           equalities_inputs=equalities)


def _attribute_tables(root):
    """id -> (fqn, kind) for the parameters, buffers and tensor attributes of module `root`."""
    table = {}
    if not isinstance(root, torch.nn.Module):
        return table
    for name, p in root.named_parameters(remove_duplicate=False):
        table.setdefault(id(p), (name, "parameter"))
    for name, b in root.named_buffers(remove_duplicate=False):
        table.setdefault(id(b), (name, "buffer"))
    for prefix, m in root.named_modules(remove_duplicate=False):
        for k, v in vars(m).items():
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
                table.setdefault(id(v), ((prefix + "." if prefix else "") + k, "constant"))
    return table


class _Builder:
    """The torch-level GraphModule torch.export's AOT step reads (see the module docstring)."""

    def __init__(self, f, flat_inputs):
        self.root = torch.nn.Module()
        self.graph = torch.fx.Graph()
        self.table = _attribute_tables(f)
        self.attr_nodes = {}  # id(tensor) -> get_attr node
        self.flat_to_fqn = {}
        self.names = set()
        self.placeholders = []
        self.input_index = {}
        self.cursor = None
        for i, x in enumerate(flat_inputs):
            node = self.graph.placeholder(f"arg_{i}")
            self.placeholders.append(node)
            if isinstance(x, torch.Tensor):
                self.input_index.setdefault(id(x), i)

    def _unique(self, base):
        name = "".join(c if c.isalnum() else "_" for c in base) or "attr"
        if name[0].isdigit():
            name = "_" + name
        out, k = name, 0
        while out in self.names or hasattr(self.root, out):
            k += 1
            out = f"{name}_{k}"
        self.names.add(out)
        return out

    def _after_inputs(self, make):
        # Attribute reads and sizes go after the placeholders and after each other, in the
        # order the graph first needs them (the order of torch's capture, so of the signature).
        cursor = self.cursor if self.cursor is not None else (self.placeholders[-1] if self.placeholders else None)
        if cursor is None:
            first = next(iter(self.graph.nodes), None)
            ctx = self.graph.inserting_before(first) if first is not None else contextlib.nullcontext()
        else:
            ctx = self.graph.inserting_after(cursor)
        with ctx:
            node = make()
        self.cursor = node
        return node

    def attribute(self, tensor, fake=None):
        """The get_attr node of a tensor the program reads from outside its inputs."""
        node = self.attr_nodes.get(id(tensor))
        if node is not None:
            return node
        fqn, kind = self.table.get(id(tensor), (None, "constant"))
        name = self._unique("L__self___" + fqn if fqn is not None else "lifted_tensor")
        if kind == "parameter":
            self.root.register_parameter(name, tensor)
            self.flat_to_fqn[name] = fqn
        else:
            # A constant tensor is a buffer here, as torch's capture installs it: torch.export
            # tells it from the module's buffers by identity and makes it a constant.
            self.root.register_buffer(name, tensor)
            if kind == "buffer":
                self.flat_to_fqn[name] = fqn
        node = self._after_inputs(lambda: self.graph.get_attr(name))
        if fake is not None:
            node.meta["example_value"] = fake
        self.attr_nodes[id(tensor)] = node
        return node


def _has_call_hooks(mod):
    from torch.nn.modules import module as nn_module

    own = (mod._forward_hooks, mod._forward_pre_hooks, mod._backward_hooks, mod._backward_pre_hooks)
    every = (nn_module._global_forward_hooks, nn_module._global_forward_pre_hooks,
             nn_module._global_backward_hooks, nn_module._global_backward_pre_hooks)
    return any(len(h) for h in own + every)


def capture(f, args, kwargs, constraints, *, input_names=None, assume_static_by_default=True):
    """(torch-level GraphModule, guards text) of `f` called on `args`/`kwargs`, captured by
    cdynamo; `constraints` are torch.export's (from the dynamic_shapes spec)."""
    from torch._export.utils import _compiling_state_context

    flat_inputs, in_spec = pytree.tree_flatten((args, kwargs))
    dims = _dims_from_constraints(constraints, () if assume_static_by_default else flat_inputs)
    names = input_names or _input_names(f, args, kwargs, in_spec)
    backend = _Capture()
    # As torch's capture does: a fresh cache, so the export compiles (and nothing it leaves
    # counts against the recompile limits of later compiles).
    _ef.reset()
    target = f
    if isinstance(f, torch.nn.Module) and _has_call_hooks(f):
        # The module's own hooks are part of what export captures (as torch's capture traces
        # them): the traced frame is a call of the module, not its forward.
        from . import _toplevel

        target = _toplevel.wrap(f)
    compiled = _ef.compile(target, backend=backend, fullgraph=True, dynamic=False)
    try:
        with _marked(flat_inputs, dims), _compiling_state_context():
            result = compiled(*args, **kwargs)
        entries = _ef.cache_entries(target) if isinstance(target, torch.nn.Module) or hasattr(target, "__code__") \
            else []
    finally:
        _ef.reset()
    guards = entries[0]["guards"] if entries else ""
    effects = entries[0].get("side_effects", 0) if entries else 0
    if effects:
        # The capture ran the program once, so what it changes outside its tensors (attribute
        # stores, list and dict updates) happened once, as an eager call would do it; torch's
        # capture drops such changes instead (with a warning too). The exported graph holds
        # neither.
        warnings.warn(f"cdynamo: the program's forward changed {effects} object(s) outside its tensors (attribute "
                      "stores, list or dict updates); the export's one run of it applied them, and the exported "
                      "program does not make them", UserWarning, stacklevel=2)
    flat_out, out_spec = pytree.tree_flatten(result)

    b = _Builder(f, flat_inputs)
    env = {}
    fakes = {}  # flat input index -> its fake in the capture's fake mode
    fake_mode = None
    gm = backend.gm
    if gm is not None:
        from torch._guards import detect_fake_mode

        fake_mode = detect_fake_mode([n.meta.get("example_value") for n in gm.graph.nodes
                                      if n.op == "placeholder"])
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        symbols = []
        for node, real in zip(placeholders, backend.example_inputs):
            fake = node.meta.get("example_value")
            if isinstance(real, torch.Tensor):
                i = b.input_index.get(id(real))
                if i is not None:
                    env[node] = b.placeholders[i]
                    fakes[i] = fake
                    b.placeholders[i].meta.update(node.meta)
                    b.placeholders[i].meta["val"] = fake
                else:
                    env[node] = b.attribute(real, fake)
            elif isinstance(fake, torch.SymInt):
                symbols.append(node)
            else:
                raise Unsupported(f"export: graph input {node.name} is neither a tensor nor a size")
        # A size symbol the graph took as an input is a size of the user input it came from.
        for node in symbols:
            expr = node.meta["example_value"].node.expr
            where = None
            for i, fake in fakes.items():
                for d, s in enumerate(fake.shape):
                    if isinstance(s, torch.SymInt) and s.node.expr == expr:
                        where = (i, d)
                        break
                if where:
                    break
            if where is None:
                raise Unsupported(f"export: the size symbol {expr} is no size of an input")
            size = b._after_inputs(lambda: b.graph.call_function(
                torch.ops.aten.sym_size.int, (b.placeholders[where[0]], where[1])))
            size.meta["example_value"] = size.meta["val"] = node.meta["example_value"]
            env[node] = size
        for name, sub in gm.named_children():
            setattr(b.root, name, sub)
        output_node = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                output_node = node
                break
            copied = b.graph.node_copy(node, lambda n: env[n])
            env[node] = copied
        outs = output_node.args[0]
        graph_outputs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        graph_outputs = [env[o] if isinstance(o, torch.fx.Node) else o for o in graph_outputs]
    else:
        graph_outputs = []

    returned = []
    for leaf in flat_out:
        if isinstance(leaf, _Out):
            returned.append(graph_outputs[leaf.index])
        elif isinstance(leaf, torch.Tensor):
            i = b.input_index.get(id(leaf))
            if i is not None:
                returned.append(b.placeholders[i])
            elif id(leaf) in b.table or id(leaf) in b.attr_nodes:
                returned.append(b.attribute(leaf))
            else:
                raise Unsupported("export: the program returns a tensor that is neither an input, an attribute "
                                  "of the module nor made by its graph")
        else:
            returned.append(leaf)
    b.graph.output(tuple(returned))
    for node in list(b.graph.nodes):  # sizes of symbols the graph took but no longer uses
        if node.op == "call_function" and node.target is torch.ops.aten.sym_size.int and not node.users:
            b.graph.erase_node(node)

    # Inputs the graph does not read still get a val (torch's AOT step reads every
    # placeholder's): a fake for a tensor (in the capture's fake mode, or a fresh one when the
    # program made no graph, sized by the spec), the value itself for a constant.
    if fake_mode is None and any(isinstance(x, torch.Tensor) for x in flat_inputs):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake_mode = FakeTensorMode(shape_env=ShapeEnv(), static_shapes=False)
    for i, x in enumerate(flat_inputs):
        meta = b.placeholders[i].meta
        if "val" in meta:
            continue
        if isinstance(x, torch.Tensor):
            fake = _shapes._export_fake(fake_mode, x, names[i], dims)[0] if id(x) in dims else None
            if fake is None:
                fake = fake_mode.from_tensor(x, static_shapes=True)
            meta["val"] = meta["example_value"] = fake
            fakes[i] = fake
        else:
            meta["val"] = x
    _check_constraints(fake_mode, fakes, names, dims, flat_inputs)

    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    from torch._dynamo.eval_frame import argument_names

    fn = f.forward if isinstance(f, torch.nn.Module) else f
    out = torch.fx.GraphModule(b.root, b.graph)
    out.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(argument_names(inspect.signature(fn), args, kwargs),
                                                    in_spec, out_spec))
    out.recompile()
    out.meta["dynamo_flat_name_to_original_fqn"] = b.flat_to_fqn
    out.meta["module_call_specs"] = {}
    if fake_mode is not None:
        out.meta["fake_mode"] = fake_mode
    return out, guards


def _export_to_torch_ir_with(original):
    """What torch.export._trace._export_to_torch_ir is while cdynamo captures for export."""

    def _export_to_torch_ir(f, args, kwargs=None, dynamic_shapes=None, *, preserve_module_call_signature=(),
                            disable_constraint_solver=False, prefer_deferred_runtime_asserts_over_guards=False,
                            restore_fqn=True, _log_export_usage=True, same_signature=True):
        from torch._dynamo.exc import UserError, UserErrorType
        from torch._export.non_strict_utils import _IntWrapper
        from torch.export.dynamic_shapes import _check_dynamic_shapes, _combine_args, _process_dynamic_shapes
        from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

        def torch_capture():
            return original(f, args, kwargs, dynamic_shapes, preserve_module_call_signature=preserve_module_call_signature,
                            disable_constraint_solver=disable_constraint_solver,
                            prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards,
                            restore_fqn=restore_fqn, _log_export_usage=_log_export_usage,
                            same_signature=same_signature)

        if not isinstance(args, tuple):
            raise UserError(UserErrorType.INVALID_INPUT,
                            f"Expecting `args` to be a tuple of example positional inputs, got {type(args)}")
        kwargs = kwargs or {}
        wrapped_args, wrapped_kwargs = pytree.tree_map_only(int, _IntWrapper, (args, kwargs))
        combined = _combine_args(f, wrapped_args, wrapped_kwargs)
        _check_dynamic_shapes(combined, dynamic_shapes)
        constraints = _process_dynamic_shapes(combined, dynamic_shapes)
        flat_inputs = pytree.tree_leaves((args, kwargs))
        reason = _fallback_reason(f, constraints, flat_inputs, preserve_module_call_signature)
        if reason is not None:
            warnings.warn(f"cdynamo: torch.export's capture of {reason} is not supported by cdynamo yet; "
                          "torch._dynamo captures this export", RuntimeWarning, stacklevel=3)
            return torch_capture()
        import dataclasses

        from torch.export._trace import DEFAULT_EXPORT_DYNAMO_CONFIG, _ignore_backend_decomps

        # Under the settings torch's capture runs with: torch._dynamo's export config (the
        # options cdynamo reads follow it: capture_scalar_outputs, automatic_dynamic_shapes),
        # and convolution backends that do not depend on sizes (mkldnn picks one by batch
        # size, a guard the spec's range would not allow).
        dynamo_cfg = dataclasses.replace(DEFAULT_EXPORT_DYNAMO_CONFIG,
                                         prefer_deferred_runtime_asserts_over_guards=
                                         prefer_deferred_runtime_asserts_over_guards)
        try:
            with torch._dynamo.config.patch(dataclasses.asdict(dynamo_cfg)), _ignore_backend_decomps():
                gm, _ = capture(f, args, kwargs, constraints)
        except ConstraintViolationError as e:
            raise UserError(UserErrorType.CONSTRAINT_VIOLATION, str(e)) from None
        except Unsupported as e:
            from . import exc

            if isinstance(e, exc.ExportUnsupported):
                raise
            raise exc.ExportUnsupported(str(e)) from None
        if isinstance(f, torch.nn.Module) and restore_fqn:
            from torch.export._trace import _restore_state_dict

            _restore_state_dict(f, gm)
        return gm

    _export_to_torch_ir.__wrapped__ = original
    return _export_to_torch_ir


@contextlib.contextmanager
def routed():
    """torch.export's strict capture goes through cdynamo for the block."""
    import torch.export._trace as trace

    current = trace._export_to_torch_ir
    if getattr(current, "__wrapped__", None) is not None:  # already routed (install())
        yield
        return
    trace._export_to_torch_ir = _export_to_torch_ir_with(current)
    try:
        yield
    finally:
        trace._export_to_torch_ir = current


def export(mod, args, kwargs=None, *, dynamic_shapes=None, preserve_module_call_signature=()):
    """``torch.export.export(mod, args, kwargs, dynamic_shapes=..., strict=True)`` with the
    graph captured by cdynamo: an ExportedProgram with the graph signature and range constraints
    torch's strict export gives. A construct cdynamo cannot capture raises cdynamo.Unsupported
    naming its line; guards that narrow the dynamic_shapes spec raise torch's UserError
    (constraint violation)."""
    with routed():
        return torch.export.export(mod, args, kwargs, dynamic_shapes=dynamic_shapes, strict=True,
                                   preserve_module_call_signature=preserve_module_call_signature)


class ExportResult(tuple):
    """(graph_module, guards), as torch._dynamo.export's: the torch-level GraphModule (called
    with the program's arguments) and the entry's guards, one line each."""

    def __new__(cls, graph_module, guards):
        return super().__new__(cls, (graph_module, guards))

    @property
    def graph_module(self):
        return self[0]

    @property
    def guards(self):
        return self[1]


def export_graph(f, *, dynamic_shapes=None, assume_static_by_default=False):
    """``cdynamo.export_graph(f, dynamic_shapes=...)(*args, **kwargs)``: the counterpart of
    ``torch._dynamo.export``: f (a function or module) captured whole by cdynamo, as the
    torch-level GraphModule torch.export lowers (flat inputs, get_attr of the module's tensors,
    the program's input and output structure) and its guards. As torch._dynamo.export,
    every input size is symbolic unless ``assume_static_by_default`` (then only the spec's)."""

    def inner(*args, **kwargs):
        from torch._dynamo.exc import UserError, UserErrorType
        from torch._export.non_strict_utils import _IntWrapper
        from torch.export.dynamic_shapes import _combine_args, _process_dynamic_shapes
        from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

        wrapped = pytree.tree_map_only(int, _IntWrapper, (args, kwargs))
        constraints = _process_dynamic_shapes(_combine_args(f, *wrapped), dynamic_shapes) if dynamic_shapes else []
        reason = _fallback_reason(f, constraints, pytree.tree_leaves((args, kwargs)), ())
        if reason is not None:
            raise Unsupported(f"cdynamo.export_graph: {reason} is not supported yet")
        try:
            with _ignore_size_backends():
                gm, guards = capture(f, args, kwargs, constraints, assume_static_by_default=assume_static_by_default)
        except ConstraintViolationError as e:
            raise UserError(UserErrorType.CONSTRAINT_VIOLATION, str(e)) from None
        return ExportResult(gm, [line for line in guards.splitlines() if line])

    return inner


def _ignore_size_backends():
    from torch.export._trace import _ignore_backend_decomps

    return _ignore_backend_decomps()


def _dynamo_export_with(original):
    """What torch._dynamo.export is under install(): export_graph for what it models, torch's
    own (with a RuntimeWarning naming why) for the rest."""

    def export(f, *extra_args, aten_graph=False, pre_dispatch=False, decomposition_table=None,
               tracing_mode="symbolic", dynamic_shapes=None, specialize_float=True, assume_static_by_default=False,
               same_signature=True, disable_constraint_solver=False,
               prefer_deferred_runtime_asserts_over_guards=False, _log_export_usage=True, constraints=None,
               **extra_kwargs):
        unsupported = [name for name, v in (("aten_graph", aten_graph), ("pre_dispatch", pre_dispatch),
                                            ("decomposition_table", decomposition_table),
                                            ("constraints", constraints), ("positional arguments", extra_args),
                                            ("keyword arguments", extra_kwargs)) if v]
        if tracing_mode != "symbolic":
            unsupported.append(f"tracing_mode={tracing_mode!r}")
        if unsupported:
            warnings.warn(f"cdynamo: torch._dynamo.export with {', '.join(unsupported)} is not supported by cdynamo "
                          "yet; torch._dynamo captures it", RuntimeWarning, stacklevel=2)
            return original(f, *extra_args, aten_graph=aten_graph, pre_dispatch=pre_dispatch,
                            decomposition_table=decomposition_table, tracing_mode=tracing_mode,
                            dynamic_shapes=dynamic_shapes, specialize_float=specialize_float,
                            assume_static_by_default=assume_static_by_default, same_signature=same_signature,
                            disable_constraint_solver=disable_constraint_solver,
                            prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards,
                            _log_export_usage=_log_export_usage, constraints=constraints, **extra_kwargs)
        return export_graph(f, dynamic_shapes=dynamic_shapes, assume_static_by_default=assume_static_by_default)

    export.__wrapped__ = original
    return export
