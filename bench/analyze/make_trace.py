#!/usr/bin/env python3
"""make_trace.py: builds a large Chrome trace from a small one, for bench/analyze.

The fixture's traceEvents are repeated with timestamps shifted past the previous copy,
ProfilerStep#N renumbered and correlation / External / flow ids shifted, so the result
reads like one long profiling run (every copy a new set of steps) rather than one run
seen many times. Copies are added until the JSON reaches --mb megabytes (10^6 bytes).
Metadata events and Kineto's "Trace" span are written once.

usage: make_trace.py FIXTURE(.json or .json.gz) --mb N -o OUT.json [--gzip OUT.json.gz]
Standard library only.
"""
import argparse
import gzip
import json
import re
import shutil
import sys

SENT = "@@pd_%s@@"


def load(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def template(ev):
    """Returns the event's JSON split around its variable fields, and the field list."""
    e = json.loads(json.dumps(ev))
    fields = []
    if isinstance(e.get("ts"), (int, float)):
        fields.append(("ts", e["ts"]))
        e["ts"] = SENT % "ts"
    name = e.get("name")
    m = re.fullmatch(r"ProfilerStep#(\d+)", name) if isinstance(name, str) else None
    if m:
        fields.append(("step", int(m.group(1))))
        e["name"] = SENT % "step"
    if isinstance(e.get("id"), int):
        fields.append(("flow", e["id"]))
        e["id"] = SENT % "flow"
    args = e.get("args")
    if isinstance(args, dict):
        for key, kind in (("correlation", "corr"), ("External id", "ext")):
            if isinstance(args.get(key), int):
                fields.append((kind, args[key]))
                args[key] = SENT % kind
    text = json.dumps(e)
    pattern = r'"@@pd_(ts|step|flow|corr|ext)@@"'
    # the fields in the order json.dumps wrote them
    value = dict(fields)
    fields = [(m.group(1), value[m.group(1)]) for m in re.finditer(pattern, text)]
    parts = re.split(pattern, text)[::2]
    return parts, fields


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture")
    ap.add_argument("--mb", type=float, required=True, help="target size of the JSON in 10^6 bytes")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--gzip", help="also write a gzip-compressed copy here")
    a = ap.parse_args()

    doc = load(a.fixture)
    events = doc.pop("traceEvents")
    doc.pop("traceName", None)
    once, repeated = [], []
    for ev in events:
        (once if ev.get("ph") == "M" or ev.get("cat") == "Trace" else repeated).append(ev)
    timed = [e for e in repeated if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = {
        "ts": (t1 - t0) + 100.0,
        "step": 1 + max([int(m.group(1)) for e in repeated
                         for m in [re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name")))] if m] or [0]),
        "flow": 1 + max([e["id"] for e in repeated if isinstance(e.get("id"), int)] or [0]),
        "corr": 1 + max([e["args"]["correlation"] for e in repeated
                         if isinstance(e.get("args", {}).get("correlation"), int)] or [0]),
        "ext": 1 + max([e["args"]["External id"] for e in repeated
                        if isinstance(e.get("args", {}).get("External id"), int)] or [0]),
    }
    templates = [template(e) for e in repeated]
    target = int(a.mb * 1e6)

    head = json.dumps(doc)[:-1]  # without the closing brace
    with open(a.out, "w", encoding="utf-8") as out:
        out.write(head + ', "traceEvents": [\n')
        written = len(head) + 20
        first = True
        for e in once:
            out.write(("" if first else ",\n") + json.dumps(e))
            first = False
        rep = 0
        while written < target:
            chunk = []
            for parts, fields in templates:
                s = [parts[0]]
                for i, (kind, v) in enumerate(fields):
                    if kind == "ts":
                        s.append("%.3f" % (v + rep * shift["ts"]))
                    elif kind == "step":
                        s.append('"ProfilerStep#%d"' % (v + rep * shift["step"]))
                    else:
                        s.append(str(v + rep * shift[kind]))
                    s.append(parts[i + 1])
                chunk.append("".join(s))
            text = ",\n".join(chunk)
            out.write(text if first else ",\n" + text)
            first = False
            written += len(text) + 2
            rep += 1
        out.write('\n], "traceName": "bench"}\n')
    if a.gzip:
        with open(a.out, "rb") as src, gzip.open(a.gzip, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    print("%s: %d copies of %d events, %.1f MB" % (a.out, rep, len(repeated), written / 1e6), file=sys.stderr)


if __name__ == "__main__":
    main()
