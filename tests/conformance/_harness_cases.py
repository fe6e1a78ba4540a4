"""Cases for test_harness.py: one that passes, one that crashes, one that hangs, one that is wrong."""
import ctypes
import time


def case_passes():
    assert 1 + 1 == 2


def case_segfaults():
    ctypes.string_at(0)


def case_hangs():
    time.sleep(600)


def case_is_wrong():
    assert 1 + 1 == 3, "wrong"
