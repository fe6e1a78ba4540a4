"""Section 1: call overhead on a cache hit (backend `lambda gm, ex: gm.forward`)."""
import torch

from common import HIT_HEADER, HIT_NOTE, Section, hit_rows, log, measure_hits, table


def add_one(x):
    return x + 1


def run(quick):
    rounds, target = (15, 2_000_000) if quick else (41, 5_000_000)
    sec = Section("1. Call overhead on a cache hit")
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    cases = [
        ("`x + 1`, 1-element tensor", add_one, [(torch.randn(1),)], None),
        ("`x + 1`, requires_grad=True", add_one, [(torch.randn(1, requires_grad=True),)], None),
        ("`x + 1` under torch.inference_mode()", add_one, [(torch.randn(1),)], torch.inference_mode),
        ("`nn.Linear(8, 8)` module, input [1, 8]", lin, [(torch.randn(1, 8),)], None),
    ]
    cases = [c + (False,) for c in cases]
    # A dynamic entry (dynamic shapes): one symbolic entry serves both lengths; the hit pays the
    # size-symbol reads and shape guards (x.size(0) >= 2) in the guard program.
    cases.append(("`x + 1`, dynamic=True, lengths 4 / 7 hit one symbolic entry", add_one,
                  [(torch.randn(4),), (torch.randn(7),)], None, True))
    results = []
    for label, fn, args, ctx, dynamic in cases:
        log(f"  [overhead] {label}")
        r = measure_hits(label, fn, args, rounds, target, ctx=ctx, dynamic=dynamic)
        results.append(r)
        if r["captured"]:
            oc, od = r["cdynamo"] - r["eager"], r["dynamo"] - r["eager"]
            log(f"    eager {r['eager']/1e3:.2f} us, cdynamo +{oc/1e3:.2f} us, dynamo +{od/1e3:.2f} us")
            met = od > 0 and oc <= od / 10
            sec.target(f"(1) {label}: cdynamo overhead <= 1/10 of dynamo's",
                       f"{oc/1e3:.2f} us vs {od/1e3:.2f} us ({oc/od:.3f})" if od > 0 else "n/a", met)
        else:
            log(f"    not captured: {r['reason']}")
            sec.target(f"(1) {label}: cdynamo overhead <= 1/10 of dynamo's", "not captured", False, r["reason"])
    sec.add(f"Median of {rounds} interleaved rounds (eager / cdynamo / torch._dynamo rotate within a round), "
            f"each round about {target/1e6:.0f} ms of back-to-back calls per candidate; times are per call. "
            "Overhead = median(frontend) - median(eager). Outputs (values and requires_grad) were checked "
            "against eager on the first call and on a hit before timing, and no frontend compiled during "
            "the timed loops.")
    sec.add(table(HIT_HEADER, hit_rows(results)))
    sec.add(HIT_NOTE)
    sec.results = results
    return sec
