"""CDYNAMO_LOGS: TORCH_LOGS-style log channels.

``CDYNAMO_LOGS=recompiles,graph_breaks`` (or ``+guards`` etc.) turns channels on; the C++
core checks a bit mask, so a disabled channel costs nothing on the hot path and a
message is only formatted when its channel is on.
"""
import logging
import os

from . import _C

# "dynamic" is emitted from Python (cdynamo/_internal/symbolic_shapes.py: each symbol made, each size kept
# static or specialized and why, each shape guard); its bit is unused by the core.
CHANNELS = {"recompiles": 1, "graph_breaks": 2, "guards": 4, "graph_code": 8, "bytecode": 16, "dynamic": 32}

log = logging.getLogger("cdynamo")
_enabled = set()


class _QuietFakePropagation(logging.Filter):
    """torch's FakeTensorMode logs an op whose meta kernel raises (at ERROR, with the
    traceback) before re-raising. Inside cdynamo's fake propagation that exception is the
    program's own (torch.stack of unequal sizes under a try), which the tracer raises as
    eagerly or breaks the graph on: the log would only print a traceback to stderr. Outside
    a trace, and in a backend's call, the record passes."""

    def filter(self, record):
        return not (record.exc_info and _C.in_fake_propagation())


logging.getLogger("torch._subclasses.fake_tensor").addFilter(_QuietFakePropagation())


def _ensure_handler():
    if not log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("[cdynamo %(channel)s] %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False


def set_logs(spec):
    """Enable channels from a comma-separated spec (``"recompiles,graph_breaks"``)."""
    _enabled.clear()
    mask = 0
    for raw in (spec or "").split(","):
        name = raw.strip().lstrip("+-")
        if not name:
            continue
        if name not in CHANNELS:
            raise ValueError(f"CDYNAMO_LOGS: unknown channel {name!r}; known: {', '.join(CHANNELS)}")
        _enabled.add(name)
        mask |= CHANNELS[name]
    _C.set_log_channels(mask)
    if mask:
        _ensure_handler()


def enabled(channel):
    return channel in _enabled


def emit(channel, message):
    """Called by the C++ core (cold path) for an enabled channel."""
    log.info(message, extra={"channel": channel})


def _disassembly(code):
    import dis
    import io

    buf = io.StringIO()
    dis.dis(code, file=buf, depth=0)
    return buf.getvalue()


def emit_bytecode(original, break_code, resume_table):
    """The `bytecode` channel: a frame's original bytecode and what a graph break generated
    for it (the break code and each resume function)."""
    parts = [f"ORIGINAL BYTECODE {original.co_qualname} {original.co_filename}:{original.co_firstlineno}",
             _disassembly(original),
             f"BREAK CODE (runs the breaking instruction natively) {break_code.co_qualname}",
             _disassembly(break_code)]
    for code in _C.resume_codes(resume_table):
        parts += [f"RESUME FUNCTION {code.co_name}", _disassembly(code)]
    emit("bytecode", "\n".join(parts))


set_logs(os.environ.get("CDYNAMO_LOGS", ""))
