"""What happened to every frame cdynamo translated, in order: the record behind the run
summary (``python -m cdynamo run``), the structured trace (tlparse) and the capture report.

The C++ hook calls ``_sink`` on the cold path only (a miss: before a translation starts and
once it ends), with the compile context off. Records survive ``cdynamo.reset()`` (they are
the history of the process); ``clear()`` forgets them. A stored record holds no live object
of the program: the code object is replaced by a snapshot of what the readers use
(``CodeInfo``) and the graph module by a flag once the listeners have seen it, and only the
newest ``MAX_RECORDS`` are kept, so that compile/reset cycles in a long run keep nothing
alive and do not grow without bound.

Compile ids follow torch._dynamo's: a code object gets a frame id the first time cdynamo
translates it, and each translation of it a frame compile id (``[frame_id/compile_id]``).
"""
import collections
import dataclasses
import sys
import time
import weakref

from . import _C

# Record kinds: "captured" (a cache entry was made; it may end in a graph break),
# "native" (the frame could not be captured and runs natively), "error" (a user-facing
# error: the backend failed, or fullgraph=True met a break), "eager_on_recompile" (the
# stance ran a miss eagerly, compiling nothing), "dispatch_mode" (a miss under a
# TorchDispatchMode of the program ran eagerly, compiling nothing, as torch._dynamo does).


MAX_RECORDS = 10000


@dataclasses.dataclass(frozen=True)
class CodeInfo:
    """What the summary, the trace and the report read of a translated code object."""
    co_filename: str
    co_qualname: str
    co_name: str
    co_firstlineno: int
    lines: tuple  # the source lines its instructions belong to

    @staticmethod
    def of(code):
        lines = tuple(sorted({line for _, _, line in code.co_lines() if line is not None}))
        return CodeInfo(code.co_filename, code.co_qualname, code.co_name, code.co_firstlineno, lines)

    def co_lines(self):
        return ((0, 0, line) for line in self.lines)


@dataclasses.dataclass
class CompileRecord:
    kind: str
    code: object
    frame_id: int
    frame_compile_id: int
    recompile_reason: str = None
    name: str = None
    guards: str = ""
    num_guards: int = 0
    # [(check text, ((filename, line, function), ...)), ...]: each guard and the program
    # line whose use installed it, innermost frame first (empty when made by the output plan)
    guard_sites: list = None
    graph_module: object = None  # while the listeners run; then None (has_graph says whether there was one)
    has_graph: bool = False
    graph_break: dict = None   # reason, filename, line, function, user_stack
    native: dict = None        # the same fields, for a frame that runs natively
    translate_ns: int = 0
    backend_ns: int = 0
    num_entries: int = 0
    start_time: float = 0.0

    @property
    def compile_id(self):
        return f"{self.frame_id}/{self.frame_compile_id}"

    @property
    def filename(self):
        return self.code.co_filename

    @property
    def function(self):
        return self.code.co_qualname

    @property
    def is_resume(self):
        return self.code.co_name.startswith("cdynamo_resume_in_")


records = collections.deque(maxlen=MAX_RECORDS)
listeners = []         # fn(phase, record): "start" / "end"
_frame_ids = weakref.WeakKeyDictionary()  # code object -> frame id
_next_frame_id = 0
_compiles = weakref.WeakKeyDictionary()   # code object -> translations so far
_last_record = weakref.WeakKeyDictionary()  # code object -> its newest record (_share_with_previous)
_current = None        # the record of the translation in progress
_backend_ns = 0        # backend time since the last record ended
_carried = {}          # counters of the C++ stats folded in before each reset()


def _new_record(kind, code, reason):
    global _next_frame_id
    frame_id = _frame_ids.get(code)
    if frame_id is None:
        frame_id = _frame_ids[code] = _next_frame_id
        _next_frame_id += 1
    n = _compiles.get(code, 0)
    _compiles[code] = n + 1
    return CompileRecord(kind=kind, code=code, frame_id=frame_id, frame_compile_id=n, recompile_reason=reason,
                         start_time=time.time())


def _notify(phase, rec):
    for fn in list(listeners):
        fn(phase, rec)


def _sink(ev):
    global _current, _backend_ns
    kind, code = ev["kind"], ev["code"]
    if kind == "start":
        _current = _new_record("start", code, ev["recompile_reason"])
        _backend_ns = 0
        _notify("start", _current)
        return
    rec = _current if _current is not None and _current.code is code else None
    _current = None
    if rec is None:  # an outcome decided without translating (stance, cache size limit)
        rec = _new_record(kind, code, ev["recompile_reason"])
        _notify("start", rec)
    rec.kind = kind
    rec.translate_ns = ev["translate_ns"]
    rec.backend_ns, _backend_ns = _backend_ns, 0
    rec.num_entries = ev["num_entries"]
    for key in ("name", "guards", "num_guards", "guard_sites", "graph_module", "graph_break", "native"):
        if key in ev:
            setattr(rec, key, ev[key])
    rec.has_graph = rec.graph_module is not None
    records.append(rec)
    _count_break_for_torch(rec)
    try:
        _notify("end", rec)
    finally:
        # Kept as history only: nothing of the program stays alive through it.
        rec.graph_module = None
        _share_with_previous(rec, code)


_NOTHING_TRACED = "no op traced"


def _count_break_for_torch(rec):
    """Counts a graph break (or a frame left to run natively) in torch._dynamo's own
    counters["graph_break"], keyed by its reason, as torch.compile does: tools and tests
    written for torch.compile read graph breaks there. Only when torch._dynamo.utils is
    already imported (importing it costs a second and nobody can read it otherwise)."""
    info = rec.graph_break or rec.native
    reason = info.get("reason") if info else None
    if not reason or (rec.graph_break is None and reason.startswith(_NOTHING_TRACED)):
        return  # a frame with nothing to compile is skipped, not broken
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is not None:
        counters["graph_break"][reason] += 1


def _site_key(site):
    text, frames = site
    return text, tuple(tuple(f) for f in frames)


def _share_with_previous(rec, code):
    """Replaces the code by its CodeInfo, and every field equal to the same field of the
    previous record of this code object by that very object: a code translated again
    (after reset(), or a recompile) mostly has the same guards, so up to MAX_RECORDS
    records of it cost little more than one (records are read, never changed)."""
    info = CodeInfo.of(code)
    prev = _last_record.get(code)
    if prev is not None:
        if prev.code == info:
            info = prev.code
        for key in ("kind", "name", "guards", "guard_sites", "graph_break", "native", "recompile_reason"):
            value = getattr(rec, key)
            if value is not None and value == getattr(prev, key):
                setattr(rec, key, getattr(prev, key))
        if rec.guard_sites and prev.guard_sites and rec.guard_sites is not prev.guard_sites:
            # Another guard set (a recompile) shares most of its guards with the previous one.
            known = {_site_key(site): site for site in prev.guard_sites}
            rec.guard_sites = [known.get(_site_key(site), site) for site in rec.guard_sites]
    rec.code = info
    _last_record[code] = rec


_backend_since_reset = 0


def add_backend_time(ns):
    global _backend_ns, _backend_since_reset
    _backend_ns += ns
    _backend_since_reset += ns


def backend_ns_since_reset():
    return _backend_since_reset


def fold_stats():
    """Keeps the counters about to be reset (cdynamo.reset())."""
    global _backend_since_reset
    for k, v in _C.stats().items():
        if k != "cache_entries":
            _carried[k] = _carried.get(k, 0) + v
    _carried["backend_ns"] = _carried.get("backend_ns", 0) + _backend_since_reset
    _backend_since_reset = 0


def cumulative_stats():
    """The counters since the process started (across resets), backend time included."""
    out = dict(_carried)
    for k, v in _C.stats().items():
        if k != "cache_entries":
            out[k] = out.get(k, 0) + v
    out["backend_ns"] = out.get("backend_ns", 0) + _backend_since_reset
    return out


def clear():
    global _current, _backend_since_reset, _next_frame_id
    _backend_since_reset = 0
    _next_frame_id = 0
    records.clear()
    _frame_ids.clear()
    _compiles.clear()
    _last_record.clear()
    _carried.clear()
    _current = None


def _loc(d):
    return f"{d['filename']}:{d['line']}"


def summary(title="cdynamo summary"):
    """Text summary of the process so far: frames, graphs, breaks, recompiles, time."""
    s = cumulative_stats()
    captured = [r for r in records if r.kind == "captured"]
    native = [r for r in records if r.kind == "native"]
    breaks = [r for r in captured if r.graph_break]
    recompiles = [r for r in records if r.recompile_reason and r.kind in ("captured", "native", "error")]
    graphs = [r for r in captured if r.has_graph]
    frontend_ns = max(0, s.get("translate_ns", 0) - s.get("backend_ns", 0))
    lines = [f"==== {title} ====",
             f"frames captured: {len(captured)} ({sum(1 for r in captured if r.is_resume)} of them resume functions "
             "after a graph break)",
             f"graphs compiled: {len(graphs)}",
             f"graph breaks: {len(breaks)}"]
    for r in breaks:
        b = r.graph_break
        lines.append(f"  [{r.compile_id}] {_loc(b)} in {r.function}: {b['reason']}")
    lines.append(f"frames run natively: {len(native)}")
    for r in native:
        n = r.native
        where = f" at {_loc(n)}" if n.get("filename") else ""
        lines.append(f"  [{r.compile_id}] {r.function} ({r.filename}:{r.code.co_firstlineno}){where}: {n['reason']}")
    lines.append(f"recompiles: {len(recompiles)}")
    for r in recompiles:
        lines.append(f"  [{r.compile_id}] {r.function} ({r.filename}:{r.code.co_firstlineno}): "
                     f"{r.recompile_reason.strip()}")
    errors = [r for r in records if r.kind == "error"]
    if errors:
        lines.append(f"compile errors: {len(errors)}")
    eager = [r for r in records if r.kind == "eager_on_recompile"]
    if eager:
        lines.append(f"misses run eagerly (stance eager_on_recompile): {len(eager)}")
    modes = [r for r in records if r.kind == "dispatch_mode"]
    if modes:
        lines.append(f"misses run eagerly (a TorchDispatchMode was active): {len(modes)}")
    lines.append(f"cache hits: {s.get('cache_hits', 0)}, misses: {s.get('cache_misses', 0)}")
    lines.append(f"time: frontend {frontend_ns / 1e9:.3f} s, backends {s.get('backend_ns', 0) / 1e9:.3f} s")
    return "\n".join(lines)


_C.set_event_sink(_sink)
