#!/usr/bin/env python3
"""trace_links.py TRACE...: how well a Chrome trace's GPU work links to the API calls that
launched it, per trace: GPU activities (kernel, gpu_memcpy, gpu_memset), how many carry a
correlation id that a cuda_runtime or cuda_driver event of the same trace carries, the API
events and their median duration (us), and the flow arrows (ac2g). A capture variant that
writes its API records another way (PD_CUPTI_OPTIONS=callback_api) must link as the default
does: run both on one program and compare the "linked" column. Exit 0; 2 when a trace does
not read.
"""
import gzip
import json
import statistics
import sys

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
API = {"cuda_runtime", "cuda_driver"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def row(path):
    """(gpu activities, linked share, API events, their median duration in us, flows)."""
    ev = load(path)
    if not isinstance(ev, list):
        raise ValueError("traceEvents is not a list")
    ev = [e for e in ev if isinstance(e, dict)]
    args = lambda e: e.get("args") if isinstance(e.get("args"), dict) else {}
    api = [e for e in ev if e.get("cat") in API and e.get("ph") == "X"]
    corr = {args(e).get("correlation") for e in api} - {None}
    gpu = [e for e in ev if e.get("cat") in GPU and e.get("ph") == "X"]
    linked = sum(1 for e in gpu if args(e).get("correlation") in corr)
    durs = [float(e.get("dur", 0)) for e in api]
    flows = sum(1 for e in ev if e.get("cat") == "ac2g" and e.get("ph") == "s")
    share = linked / len(gpu) if gpu else float("nan")
    return len(gpu), share, len(api), statistics.median(durs) if durs else float("nan"), flows


def main(paths):
    if not paths:
        print("usage: bench/overhead/trace_links.py TRACE...", file=sys.stderr)
        return 2
    rows = []
    for p in paths:  # every trace read before anything is printed
        try:
            rows.append((row(p), p))
        except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
            print(f"trace_links: {p}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
            return 2
    print(f"{'gpu':>6s} {'linked':>7s} {'api':>6s} {'api p50 us':>10s} {'flows':>6s}  trace")
    for (n, share, napi, p50, flows), p in rows:
        print(f"{n:6d} {share:7.3f} {napi:6d} {p50:10.2f} {flows:6d}  {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
