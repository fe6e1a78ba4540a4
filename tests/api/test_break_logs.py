"""CDYNAMO_LOGS=graph_breaks and =bytecode: one record per break with its reason and source
line; the original bytecode next to the generated break code and resume functions."""
import logging

import torch

import cdynamo


def _logged(channels, fn, *args, caplog):
    cdynamo.set_logs(channels)
    try:
        with caplog.at_level(logging.INFO, logger="cdynamo"):
            cdynamo._logging.log.propagate = True
            out = cdynamo.compile(fn, backend="eager")(*args)
    finally:
        cdynamo._logging.log.propagate = False
        cdynamo.set_logs("")
    return out, [r.getMessage() for r in caplog.records]


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y.relu()
    return y.tanh()


def test_graph_breaks_channel_prints_each_break_with_reason_and_line(caplog):
    x = torch.ones(3)
    out, messages = _logged("graph_breaks", branchy, x, caplog=caplog)
    torch.testing.assert_close(out, branchy(x))
    (msg,) = [m for m in messages if m.startswith("Graph break")]
    assert "data-dependent" in msg
    assert f"{__file__}:{branchy.__code__.co_firstlineno + 2}" in msg


def test_bytecode_channel_prints_original_break_and_resume_code(caplog):
    x = -torch.ones(3)
    out, messages = _logged("bytecode", branchy, x, caplog=caplog)
    torch.testing.assert_close(out, branchy(x))
    (msg,) = messages
    assert "ORIGINAL BYTECODE branchy" in msg
    assert "BREAK CODE" in msg and "___continuation" in msg
    line = branchy.__code__.co_firstlineno
    # One resume function per way out of the branch: the `if` body and what follows it.
    assert f"RESUME FUNCTION cdynamo_resume_in_branchy_at_{line + 3}" in msg
    assert f"RESUME FUNCTION cdynamo_resume_in_branchy_at_{line + 4}" in msg
    assert msg.count("POP_JUMP_FORWARD_IF_FALSE") >= 2


def test_no_log_record_when_the_channel_is_off(caplog):
    out, messages = _logged("", branchy, torch.ones(2), caplog=caplog)
    assert messages == []
