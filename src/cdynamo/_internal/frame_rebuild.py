"""Helpers the runtime calls when it rebuilds a frame's state at a graph break."""
import contextlib
import functools
import itertools
import types


def grad_mode_exit(cls, prev):
    """The bound ``__exit__`` of a ``cls`` context (no_grad, enable_grad, set_grad_enabled)
    that was entered when the grad mode was ``prev``: leaving it restores ``prev``, as the
    original ``with`` block would have."""
    ctx = cls.__new__(cls)
    ctx.prev = prev
    return ctx.__exit__


def grad_mode_object(cls, prev, args):
    """A ``cls`` context object (no_grad, enable_grad, set_grad_enabled) made in the trace and
    not entered yet, rebuilt without changing the grad mode (set_grad_enabled(mode) sets it
    when called): ``prev`` is the mode it saw when made, ``args`` its arguments."""
    ctx = cls.__new__(cls)
    ctx.prev = prev
    import torch

    if cls is torch.set_grad_enabled:
        ctx.mode = args[0]
    return ctx


def null_exit():
    """The ``__exit__`` of a context the trace treats as doing nothing (the profiler's, as
    torch._dynamo does): a ``with`` block continued after a graph break leaves it that way."""
    return contextlib.nullcontext().__exit__


def _apply_state(kind, state):
    import torch

    if kind == "saved_tensors_hooks":  # state: the message hooks are disabled with, or None
        if state is None:
            torch._C._autograd._saved_tensors_hooks_enable()
        else:
            torch._C._autograd._saved_tensors_hooks_disable(state)
    elif kind == "sdpa_kernel":  # state: (the enabled backends, whether in priority order)
        backends, priority = state
        torch.nn.attention._sdpa_kernel(list(backends), set_priority=priority)
    else:
        raise ValueError(f"unknown state {kind!r}")


class StateExit:
    """What leaving a `with` block of a torch state context continued after a graph break
    does: put back the state ``prev`` the block found (``target`` is the state inside it)."""

    def __init__(self, kind, target, prev):
        self.kind = kind
        self.target = target
        self.prev = prev

    def __exit__(self, *exc):
        _apply_state(self.kind, self.prev)
        return None


def state_exit(kind, target, prev):
    """The ``__exit__`` of a state context's block cut by a graph break: the graph ended by
    leaving the block (as torch._dynamo's graphs do), so its state is set again here, for the
    instruction that breaks and the resume function, which leaves the block through it."""
    _apply_state(kind, target)
    return StateExit(kind, target, prev).__exit__


def make_function(code, globals, qualname, defaults, kwdefaults, closure, attrs, self_cells=(), annotations=None):
    """A function made by the traced program (MAKE_FUNCTION), rebuilt at a graph break with
    the same code, defaults and closure cells (shared with the frame and other closures).
    The cells at the indices `self_cells` were made empty: they hold the function itself
    (a function that refers to itself), filled here once it exists. `annotations` is what
    MAKE_FUNCTION was given (a tuple of name, value pairs) or the dict the trace read."""
    fn = types.FunctionType(code, globals, code.co_name, defaults, closure or None)
    fn.__qualname__ = qualname
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if attrs:
        fn.__dict__.update(attrs)
    if annotations is not None:
        if isinstance(annotations, tuple):
            annotations = dict(zip(annotations[::2], annotations[1::2]))
        fn.__annotations__ = annotations
    for i in self_cells:
        closure[i].cell_contents = fn
    return fn


def _identity(x):
    return x


def _keep(x):
    return True


def _never(x):
    return False


def _second(a, b):
    return b


def _columns(items):
    """The columns of rows (a tuple of tuples), each as an iterator; the first one counts the
    rows left (zip and zip_longest take from it first)."""
    if not items:
        return []
    return [iter([row[i] for row in items]) for i in range(len(items[0]))]


def _zip(items):
    cols = _columns(items)
    return zip(*cols), (cols[0] if cols else iter(()))


def _zip_longest(items):
    cols = _columns(items)
    return itertools.zip_longest(*cols), (cols[0] if cols else iter(()))


def _enumerate(items):
    src = iter([v for _, v in items])
    return enumerate(src, items[0][0] if items else 0), src


def _range_iterator(items):
    if not items:
        it = iter(range(0))
    else:
        step = items[1] - items[0] if len(items) > 1 else 1
        it = iter(range(items[0], items[-1] + step, step))
    return it, it


def _over(make):
    """A rebuilder that wraps an iterator over the items: the source counts what is left."""
    def rebuild(items):
        src = iter(items)
        return make(src), src
    return rebuild


def _own(make):
    """A rebuilder whose iterator counts what it has left itself (a length hint)."""
    def rebuild(items):
        it = make(items)
        return it, it
    return rebuild


_REBUILDERS = {
    map: _over(lambda src: map(_identity, src)),
    filter: _over(lambda src: filter(_keep, src)),
    zip: _zip,
    enumerate: _enumerate,
    reversed: _own(lambda items: reversed(items[::-1])),
    type(iter(range(0))): _range_iterator,
    type(iter([])): _own(lambda items: iter(list(items))),
    type(reversed([])): _own(lambda items: reversed(list(items[::-1]))),
    type(iter(set())): _own(lambda items: iter(set(items))),
    type(iter("")): _own(lambda items: iter("".join(items))),
    type(iter({})): _own(lambda items: iter(dict.fromkeys(items))),
    type(iter({}.values())): _own(lambda items: iter(dict(enumerate(items)).values())),
    type(iter({}.items())): _own(lambda items: iter(dict(items).items())),
    type(reversed({})): _own(lambda items: reversed(dict.fromkeys(items[::-1]))),
    types.GeneratorType: _over(lambda src: (x for x in src)),
    itertools.chain: _over(lambda src: itertools.chain(src)),
    itertools.islice: _over(lambda src: itertools.islice(src, None)),
    itertools.compress: _over(lambda src: itertools.compress(src, itertools.repeat(True))),
    itertools.filterfalse: _over(lambda src: itertools.filterfalse(_never, src)),
    itertools.takewhile: _over(lambda src: itertools.takewhile(_keep, src)),
    itertools.dropwhile: _over(lambda src: itertools.dropwhile(_never, src)),
    itertools.accumulate: _over(lambda src: itertools.accumulate(src, _second)),
    itertools.starmap: _over(lambda src: itertools.starmap(_identity, ((x,) for x in src))),
    itertools.zip_longest: _zip_longest,
}


def real_iterator(kind, items):
    """An iterator of type `kind` (map, zip, list_iterator, range_iterator, a generator, ...)
    over `items` (a tuple), and an iterator whose length hint says how many of them are left
    once it is used (the items, already computed, of an iterator made in the trace)."""
    rebuild = _REBUILDERS.get(kind)
    if rebuild is None:
        it = iter(items)
        return it, it
    return rebuild(items)


def rebuild_iterator(kind, items):
    """An iterator made in the trace, rebuilt at the end of the frame as the same type of
    iterator over the items it had left."""
    return real_iterator(kind, items)[0]


def list_iterator_at(lst, index):
    """iter(lst) that has taken `index` items: it reads the list by index from there, so it
    sees what is done to the list later, as the iterator the trace modelled would have."""
    it = iter(lst)
    it.__setstate__(index)
    return it


def list_reverse_iterator_at(lst, index):
    """reversed(lst) whose next item is lst[index] (-1: exhausted): it reads the list as it
    is when each item is taken, as the iterator the trace modelled."""
    it = reversed(lst)
    it.__setstate__(index)
    if index < 0:
        next(it, None)  # past its start: it lets its list go, as Python's does
    return it


def container_iterator_at(container, which, taken, backwards=False):
    """iter(container) (which: 0 its keys, 1 a dict's values, 2 a dict's items; backwards:
    reversed()) that has taken `taken` items: it goes on over the container itself, so a
    change of the container's size later makes it raise as Python's does."""
    over = container if which == 0 else container.values() if which == 1 else container.items()
    it = reversed(over) if backwards else iter(over)
    for _ in range(taken):
        next(it)
    return it


def deque_iterator_at(d, taken, changed):
    """iter(d) that has taken `taken` items. `changed`: the deque changed since that iterator
    was made (its contents here are the changed ones), so the iterator's next step raises
    RuntimeError, as Python's does even past its end: a change that keeps the contents (a
    rotation there and back, or an item taken and put back) moves the deque's count of
    changes on (the tracer rebuilds no such iterator over a deque of maxlen 0)."""
    it = iter(d)
    if not changed:
        for _ in range(taken):
            next(it)
    elif len(d) >= 2:
        d.rotate(1)
        d.rotate(-1)
    elif len(d) == 1:
        d.append(d.pop())
    else:
        d.append(None)
        d.pop()
    return it


def rebuild_partial(fn, args, keywords):
    """A functools.partial made in the trace, handed back (or to a resume function) as a real one."""
    return functools.partial(fn, *args, **keywords)


__all__ = ["container_iterator_at", "deque_iterator_at", "grad_mode_exit", "list_iterator_at", "list_reverse_iterator_at", "make_function",
           "real_iterator", "rebuild_iterator", "rebuild_partial"]


def rebuild_exception(template, _made=None):
    """A new exception like `template` (one the trace made and returned, whose arguments and
    attributes are constants): its class made again from its .args (a C initialiser rerun,
    a Python one replaced by its __dict__), and the exceptions it chains to made again too,
    so that each call returns objects of its own, as eager does."""
    made = {} if _made is None else _made
    if id(template) in made:
        return made[id(template)]
    cls = type(template)
    new = cls.__new__(cls, *template.args)
    made[id(template)] = new
    init = getattr(cls, "__init__")
    if not isinstance(init, types.FunctionType):
        init(new, *template.args)
    if getattr(template, "__dict__", None):
        new.__dict__.update(template.__dict__)
    ctx, cause = template.__context__, template.__cause__
    new.__context__ = None if ctx is None else rebuild_exception(ctx, made)
    new.__cause__ = None if cause is None else rebuild_exception(cause, made)
    new.__suppress_context__ = template.__suppress_context__
    return new
