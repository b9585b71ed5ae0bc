#!/usr/bin/env python3
"""py_baseline.py: the Python side of bench/analyze: what a user would write first.

json.load the whole trace (gzip detected by content), then add up the durations of the
complete ("X") events per name and print the three names with the most time. Standard
library only, so it runs wherever python3 does.

usage: py_baseline.py TRACE(.json or .json.gz)
"""
import gzip
import json
import sys


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        doc = json.load(f)
    per_name = {}
    events = doc["traceEvents"]
    for e in events:
        if e.get("ph") != "X":
            continue
        row = per_name.setdefault(e.get("name"), [0, 0.0])
        row[0] += 1
        row[1] += e.get("dur", 0)
    top = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:3]
    print("%d entries, %d names" % (len(events), len(per_name)))
    for name, (calls, total) in top:
        print("%12.3f ms %8d  %s" % (total / 1e3, calls, str(name)[:80]))


if __name__ == "__main__":
    main()
