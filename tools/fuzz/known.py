"""Bugs the fuzzer has found that are diagnosed but not fixed yet (each with a strict-xfail
regression test in tests/reliability/test_fuzz_regressions.py; tools/fuzz/RUNS.md has the
diagnoses), and limits of a backend that torch._dynamo shares (each with a test that shows
both frontends fail alike). A failure with the same signature (or containing
`symptom_contains`) whose program uses every production in `tags` counts as a duplicate of
it, so runs (and the fixed-seed run in `make test`) report only what is
new. Remove an entry with its fix.
"""
KNOWN = [
    # (F2, a recursive closure escaping the trace, is fixed: its test passes and its entry is
    # gone, so a program failing that way again is reported.)
    # Not a cdynamo bug: AOT autograd (aot_eager) refuses a graph that changes in place a tensor
    # an earlier op saved for backward (`x.add_(x * y)` with y requiring grad), under
    # torch._dynamo the same way (seeds 94001, 96000, 96004). Matched on the cause's text only.
    {"id": "A1", "signature": None, "tags": [],
     "symptom_contains": "has been modified by an inplace operation",
     "test": "tests/reliability/test_fuzz_regressions.py::"
             "test_aot_autograd_refuses_an_in_place_change_of_a_saved_tensor_as_under_torch_dynamo"},
]
