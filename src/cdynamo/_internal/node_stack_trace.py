"""The stack trace of a graph node, as torch._dynamo records it (meta["stack_trace"]).

The graph builder calls ``format_stack`` with the frames of the traced program that made a
node's call, for every node it records (csrc/graph/graph_builder.cpp).
"""
import itertools
import os
import traceback

# cdynamo's own folder (its eval_frame, its polyfills, ...): frames from there are left out.
_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def format_stack(frames):
    """A graph node's meta["stack_trace"] as torch._dynamo records it: the user's frames
    that made the call, ``((code, byte offset), ...)`` outermost first, formatted by
    traceback (innermost last). Frames of torch.nn's modules and of cdynamo itself (its
    polyfills) are left out, as torch._dynamo leaves out nn.Module internals and its own."""
    summaries = []
    for code, addr in frames:
        filename = code.co_filename
        if "torch/nn/modules" in filename.replace(os.sep, "/") or filename.startswith(_here):
            continue
        pos = next(itertools.islice(code.co_positions(), addr // 2, None), None)
        line, _, col, end_col = pos if pos is not None else (None, None, None, None)
        summaries.append(
            traceback.FrameSummary(
                filename, line or code.co_firstlineno, code.co_name, lookup_line=False, colno=col, end_colno=end_col
            )
        )
    return "".join(traceback.StackSummary.from_list(summaries).format())
