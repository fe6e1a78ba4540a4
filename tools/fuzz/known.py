"""Bugs the fuzzer has found that are diagnosed but not fixed yet (listed with diagnoses in
/work/helpers/fuzz-bugs.md; each has a strict-xfail regression test). A failure with the same
signature whose program uses every production in `tags` counts as a duplicate of it, so runs
(and the fixed-seed run in `make test`) report only what is new. Remove an entry with its fix.
"""
KNOWN = [
    {"id": "F2", "signature": "exception: eager ok / compiled RuntimeError", "tags": ["closure.recursive"],
     "symptom_contains": "cannot rebuild a container that contains itself",
     "test": "tests/reliability/test_fuzz_regressions.py::test_recursive_closure_escaping_the_trace"},
]
