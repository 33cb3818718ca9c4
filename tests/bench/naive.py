"""The baseline: the user guide's own quick per-ring reader (§5, "For a quick per-ring number").

Kept as the guide writes it — ``json.loads`` every line into one list, pair begins and ends
with a dict keyed by depth, per-ring heap peaks — only wrapped in a function and a ``with``.
Memory is O(file): the whole file lives as Python dicts (about 6x the file size).

    python tests/bench/naive.py FILE
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

Peaks = dict[int, tuple[int, int, str]]  # ring -> (high_water, live_at_exit, site)


def naive_summary(path: str) -> tuple[dict[str, Any], Peaks]:
    """The guide's snippet: (metadata, per-ring heap peaks)."""
    with open(path) as fh:
        lines = [json.loads(line) for line in fh]
    meta, records, open_scopes = lines[0], lines[1:], {}
    peak: defaultdict[int, tuple[int, int, str]] = defaultdict(lambda: (0, 0, ""))
    for r in records:
        if r["phase"] == "begin":
            open_scopes[r["depth"]] = r
            continue
        b = open_scopes.pop(r["depth"], None)
        if b is None:
            continue
        hw = r["heap_end"] - b["heap_start"]  # scope_high_water
        live = r["heap_end"] - r["heap_start"]  # real_occupancy
        prev = peak[r["ring"]]
        peak[r["ring"]] = (max(hw, prev[0]), max(live, prev[1]), r["site"] if hw > prev[0] else prev[2])
    return meta, dict(peak)


def main(argv: list[str]) -> int:
    meta, peak = naive_summary(argv[1])
    print(f"fatal={meta['fatal']} dropped={meta['dropped']}")
    for ring, (hw, live, site) in sorted(peak.items()):
        cap = meta["heap_max"][ring]
        print(f"ring {ring}: high_water {hw / 2**20:7.1f} MiB ({100 * hw / cap:5.1f}% of {cap / 2**20:.0f} MiB)"
              f"  live_at_exit {live / 2**20:7.1f} MiB  peak site {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
