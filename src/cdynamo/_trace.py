"""Structured trace records in PyTorch's own format, for tlparse.

With ``TORCH_TRACE=<dir>`` (or ``CDYNAMO_TRACE=<dir>``) every translation cdynamo makes is
written through torch._logging's structured logging (``trace_structured`` and its
``LazyTraceHandler``), with the records torch._dynamo writes: ``dynamo_start`` (the stack
that led to the frame), ``dynamo_output_graph`` (the FX graph), ``dynamo_cpp_guards_str``
(the guards), the ``dynamo_graph_break_reason`` and ``recompile_reasons`` artifacts, and
``compilation_metrics`` (times, counts, failure or restart reasons). While a frame is
translated, torch's CompileContext carries its compile id, so the backends' own records
(AOT autograd, inductor) are filed under the same ``[frame_id/compile_id]``.
"""
import logging
import os
import sys
import traceback

from . import _events

_enabled = False
_contexts = []
_here = os.path.dirname(os.path.abspath(__file__)) + os.sep


def enabled():
    return _enabled


def enable(trace_dir=None):
    """Write structured records (to ``trace_dir``, or where TORCH_TRACE already sends
    torch's own)."""
    global _enabled
    from torch._logging import _internal as li

    if trace_dir is not None:
        lazy = [h for h in li.trace_log.handlers if isinstance(h, li.LazyTraceHandler)]
        if lazy and lazy[0].root_dir is None and lazy[0].stream is None:
            # torch's own handler, set up at import without TORCH_TRACE: give it the folder
            # (it would otherwise remove itself on the first record).
            lazy[0].root_dir = os.fspath(trace_dir)
        elif not lazy:
            handler = li.LazyTraceHandler(os.fspath(trace_dir))
            handler.setFormatter(li.TorchLogsFormatter(trace=True))
            li.trace_log.setLevel(logging.DEBUG)
            li.trace_log.addHandler(handler)
    if not li.trace_log.handlers:
        return False
    if not _enabled:
        _events.listeners.append(_on_event)
        _enabled = True
    return True


def disable():
    global _enabled
    if _enabled:
        _events.listeners.remove(_on_event)
        _enabled = False


def flush():
    from torch._logging import _internal as li

    for h in li.trace_log.handlers:
        h.flush()


def _user_stack(code):
    """The Python stack that reached the frame being translated (cdynamo's own frames
    left out), then the frame itself."""
    frames = [f for f in traceback.extract_stack(sys._getframe(1))
              if not f.filename.startswith(_here)]
    frames.append(traceback.FrameSummary(code.co_filename, code.co_firstlineno, code.co_name, line=""))
    return frames


def _log(name, metadata=None, payload=None, compile_id=None):
    from torch._logging._internal import trace_structured

    trace_structured(name, metadata_fn=lambda: metadata or {},
                     payload_fn=(lambda: payload) if payload is not None else (lambda: None),
                     compile_id=compile_id)


def _artifact(name, encoding, payload, compile_id=None):
    _log("artifact", {"name": name, "encoding": encoding}, payload, compile_id)


def _graph_text(gm):
    try:
        return gm.print_readable(print_output=False, include_stride=True, include_device=True)
    except Exception:  # a graph that cannot print its fake values still has its code
        return gm.code


def _sizes(gm):
    sizes = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val", node.meta.get("example_value"))
        shape = getattr(val, "shape", None)
        if shape is not None:
            sizes[node.name] = [int(s) if isinstance(s, int) else str(s) for s in shape]
    return sizes


def _on_event(phase, rec):
    import torch._guards as g
    from torch._logging.structured import from_traceback

    cid = g.CompileId(frame_id=rec.frame_id, frame_compile_id=rec.frame_compile_id)
    if phase == "start":
        cm = g.compile_context(g.CompileContext(cid))
        cm.__enter__()
        _contexts.append(cm)
        _log("dynamo_start", {"stack": from_traceback(_user_stack(rec.code))})
        if rec.recompile_reason:
            _artifact("recompile_reasons", "json", [rec.recompile_reason.strip()])
        return
    try:
        _write_outcome(rec)
    finally:
        if _contexts:
            _contexts.pop().__exit__(None, None, None)


def _write_outcome(rec):
    gm = rec.graph_module
    if gm is not None:
        _log("dynamo_output_graph", {"sizes": _sizes(gm)}, _graph_text(gm))
    if rec.kind == "captured":
        _log("dynamo_cpp_guards_str", {}, rec.guards)
    restart = []
    if rec.graph_break:
        b = rec.graph_break
        restart.append(f"Graph break: {b['reason']} at {b['filename']}:{b['line']}")
        _artifact("dynamo_graph_break_reason", "string",
                  f"Graph Break Reason: {b['reason']}\nUser code traceback:\n"
                  f"  File \"{b['filename']}\", line {b['line']}, in {rec.function}\n{b['user_stack']}\n")
    nodes = list(gm.graph.nodes) if gm is not None else []
    metrics = {
        "compile_id": rec.compile_id,
        "frame_key": str(rec.frame_id + 1),
        "co_name": rec.code.co_name,
        "co_filename": rec.code.co_filename,
        "co_firstlineno": rec.code.co_firstlineno,
        "cache_size": max(0, rec.num_entries - (1 if rec.kind == "captured" else 0)),
        "accumulated_cache_size": rec.num_entries,
        "guard_count": rec.num_guards,
        "graph_op_count": sum(1 for n in nodes if n.op.startswith("call")),
        "graph_node_count": len(nodes),
        "graph_input_count": sum(1 for n in nodes if n.op == "placeholder"),
        "start_time": rec.start_time,
        "entire_frame_compile_time_s": rec.translate_ns / 1e9,
        "backend_compile_time_s": rec.backend_ns / 1e9,
        "restart_reasons": restart,
        "has_guarded_code": rec.kind == "captured",
        "dynamo_config": "cdynamo",
    }
    if rec.kind == "native":
        n = rec.native
        metrics.update(fail_type="Unsupported", fail_reason=n["reason"],
                       fail_user_frame_filename=n["filename"] or rec.filename,
                       fail_user_frame_lineno=n["line"] or rec.code.co_firstlineno)
    elif rec.kind == "error":
        metrics.update(fail_type="CdynamoError", fail_reason="the backend or fullgraph=True raised (see the traceback)")
    elif rec.kind == "eager_on_recompile":
        metrics.update(fail_type="EagerOnRecompile", fail_reason="stance eager_on_recompile: the miss ran eagerly")
    elif rec.kind == "dispatch_mode":
        metrics.update(fail_type="DispatchMode", fail_reason="a TorchDispatchMode was active: the miss ran eagerly")
    _log("compilation_metrics", metrics)
