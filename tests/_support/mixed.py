"""Files of every kind, for the tests that require the compiled reading core and the pure-Python path
to read alike (``tests/stages/test_core.py``).

:func:`mixed_files` draws a run as the runtime writes it (any schema version; v4/v5 heap counters
wrapped modulo their capacity; nesting up to the collector's depth cap; some rings out of the formula)
and breaks lines in every way the decoder names, and in the ways only a fast path could get wrong
(another key order, escapes, 19-digit numbers, a site with a quote, control bytes or UTF-8, CRLF, two
values on a line, torn lines, garbage), then cuts the file anywhere.  :func:`cuts` draws chunk
boundaries.  :func:`records` draws :class:`Record` sequences the decoder would never make, for the
pairers alone.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from hypothesis import strategies as st

from ringtrace.model.records import Meta, Record

SITES = ("(unknown):0", "orch.cpp:12", "paged_attention_orch.cpp:157", "a.cpp:1", "b.cpp:2")
ODD_SITES = ('q"uote.cpp:3', "back\\slash.cpp:4", "caf\u00e9.cpp:5", "tab\there.cpp:6", "br}{ace, \"x\": 1.cpp:7",
             "", "\u2603", "del\x7f.cpp:8", "sp ace.cpp:9")
KEYS = ("site", "phase", "depth", "ring", "task_window_start", "task_window_end", "heap_start", "heap_end",
        "dep_pool_start", "dep_pool_end", "tensormap")
COUNTERS = KEYS[4:]
BREAKS = ("backwards", "negative", "huge", "nineteen_digits", "float", "leading_zero", "minus_zero", "deep",
          "cap_depth", "ring", "task", "no_dep_pool", "null_dep_pool", "key_order", "extra_key", "compact",
          "leading_space", "trailing_space", "crlf", "blank", "spaces", "torn", "two_on_a_line", "split",
          "garbage", "nul", "metadata_again", "site_quote", "site_escape", "site_utf8", "site_cut_utf8",
          "site_control", "site_odd", "long_line", "bool", "null", "nested", "not_an_object", "duplicate",
          "drop", "phase_case")


def _meta_line(rnd: random.Random, version: int, rings: int, caps: dict[str, list[int]], records: int) -> bytes:
    m: dict[str, Any] = {"version": version, "fatal": rnd.random() < 0.1, "dropped": 0}
    if rnd.random() < 0.8:
        m["total"] = records + rnd.choice((0, 0, 0, 1, 5))
    if rnd.random() < 0.9:
        m["task_window_max"] = caps["task_window"][:rings]
        m["heap_max"] = caps["heap"][:rings]
    if version >= 5 and rnd.random() < 0.9:
        m["dep_pool_max"] = caps["dep_pool"][:rings]
    m["tensormap_max"] = rnd.choice((0, 16, 1 << 16))
    kind = rnd.random()
    if kind < 0.04:
        m["version"] = str(version)  # bad_metadata
    elif kind < 0.07:
        m["dropped"] = -1
    elif kind < 0.09:
        return b"[1, 2, 3]"
    elif kind < 0.11:
        return b"not json at all"
    return json.dumps(m).encode()


def _record(rnd: random.Random, site: str, phase: str, depth: int, ring: int, state: list[int], wrap: list[int] | None,
            with_dp: bool) -> dict[str, Any]:
    for i in (1, 3, 5):  # heads move on; tails follow some of the way
        state[i] += rnd.choice((0, 0, 1, 2, rnd.randint(0, 300)))
        state[i - 1] += rnd.randint(0, state[i] - state[i - 1])
    rec: dict[str, Any] = {"site": site, "phase": phase, "depth": depth, "ring": ring,
                           "task_window_start": state[0], "task_window_end": state[1]}
    heap = (state[2], state[3])
    if wrap is not None and wrap[ring] > 0:  # v4/v5: offsets into the ring
        heap = (state[2] % wrap[ring], state[3] % wrap[ring])
    rec["heap_start"], rec["heap_end"] = heap
    if with_dp:
        rec["dep_pool_start"], rec["dep_pool_end"] = state[4] + 1, state[5] + 1
    rec["tensormap"] = rnd.randint(0, 40)
    return rec


def _encode(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec).encode()


def _broken(kind: str, rnd: random.Random, rec: dict[str, Any], meta: bytes) -> list[bytes]:
    """The lines that replace ``rec``'s line for a break of ``kind``."""
    r = dict(rec)
    if kind == "backwards":
        key = rnd.choice(COUNTERS[:-1] if "dep_pool_end" in r else COUNTERS[:4])
        r[key] = max(int(r[key]) - rnd.randint(1, 500), 0)
    elif kind == "negative":
        r[rnd.choice([k for k in COUNTERS if k in r])] = -rnd.randint(1, 5)
    elif kind == "huge":
        r[rnd.choice([k for k in COUNTERS if k in r])] = rnd.choice(((1 << 63), (1 << 63) - 1, 10 ** 25))
    elif kind == "nineteen_digits":  # in range, longer than the scanner takes
        r[rnd.choice([k for k in COUNTERS if k in r])] = rnd.choice((10 ** 18, (1 << 63) - 1)) + int(r["tensormap"])
    elif kind == "float":
        line = _encode(r).replace(b'"depth": %d' % r["depth"], b'"depth": %d.0' % r["depth"])
        return [line.replace(b'"tensormap": ', b'"tensormap": 1e')]
    elif kind == "leading_zero":
        return [_encode(r).replace(b'"ring": ', b'"ring": 0')]
    elif kind == "minus_zero":
        return [_encode(r).replace(b'"tensormap": ', b'"tensormap": -0')]
    elif kind == "deep":
        r["depth"] = rnd.choice((65, 66, 1000, -1))
    elif kind == "cap_depth":
        r["depth"] = rnd.choice((63, 64))
    elif kind == "ring":
        r["ring"] = rnd.choice((4, 8, 99, -1, 1 << 40))
    elif kind == "task":
        r["phase"] = "task"
        r["task_id"] = rnd.randint(0, 99)
    elif kind == "no_dep_pool":
        r.pop("dep_pool_start", None)
        if rnd.random() < 0.5:
            r.pop("dep_pool_end", None)
    elif kind == "null_dep_pool":
        r["dep_pool_start"] = None
    elif kind == "key_order":
        keys = list(r)
        rnd.shuffle(keys)
        r = {k: r[k] for k in keys}
    elif kind == "extra_key":
        r["extra"] = rnd.choice((1, "x", None))
    elif kind == "compact":
        return [json.dumps(r, separators=(",", ":")).encode()]
    elif kind == "leading_space":
        return [b" " + _encode(r)]
    elif kind == "trailing_space":
        return [_encode(r) + rnd.choice((b" ", b"\t"))]
    elif kind == "crlf":
        return [_encode(r) + b"\r"]
    elif kind == "blank":
        return [b""]
    elif kind == "spaces":
        return [b" \t "]
    elif kind == "torn":
        raw = _encode(r)
        return [raw[:rnd.randint(1, len(raw) - 1)]]
    elif kind == "two_on_a_line":
        return [_encode(r) + rnd.choice((b"", b" ")) + _encode(r)]
    elif kind == "split":
        raw = _encode(r)
        at = rnd.randint(1, len(raw) - 1)
        return [raw[:at], raw[at:]]
    elif kind == "garbage":
        return [bytes(rnd.randint(0, 255) for _ in range(rnd.randint(1, 40))).replace(b"\n", b"")]
    elif kind == "nul":
        return [b"\x00" * rnd.randint(1, 8)]
    elif kind == "metadata_again":
        return [meta]
    elif kind == "site_quote":  # the runtime writes the site unescaped
        return [_encode({**r, "site": "SITE"}).replace(b'"SITE"', b'"q"uote.cpp:3"')]
    elif kind == "site_escape":
        return [_encode({**r, "site": rnd.choice(ODD_SITES)})]  # json.dumps escapes
    elif kind == "site_utf8":
        return [json.dumps({**r, "site": rnd.choice(("caf\u00e9.cpp:1", "\u2603:2"))}, ensure_ascii=False).encode()]
    elif kind == "site_cut_utf8":
        return [_encode({**r, "site": "SITE"}).replace(b'"SITE"', b'"caf\xc3"')]
    elif kind == "site_control":
        return [_encode({**r, "site": "SITE"}).replace(b'"SITE"', b'"a\x01b\x1fc"')]
    elif kind == "site_odd":
        r["site"] = rnd.choice(ODD_SITES)
        return [json.dumps(r, ensure_ascii=False).encode()]
    elif kind == "long_line":
        r["site"] = "L" * rnd.choice((150, 250, 700))
    elif kind == "bool":
        r[rnd.choice(("depth", "tensormap", "heap_end"))] = True
    elif kind == "null":
        r[rnd.choice(("depth", "ring", "tensormap", "site", "phase"))] = None
    elif kind == "nested":
        return [b'{"site": ' + b"[" * 2000 + b"]" * 2000 + b"}"]
    elif kind == "not_an_object":
        return [rnd.choice((b"[1, 2]", b"42", b'"text"', b"null"))]
    elif kind == "duplicate":
        return [_encode(r), _encode(r)]
    elif kind == "drop":
        return []
    elif kind == "phase_case":
        r["phase"] = rnd.choice(("Begin", "END", "begin ", ""))
    return [_encode(r)]


@st.composite
def mixed_files(draw: st.DrawFn) -> bytes:
    """A scope_stats file of any version with any mix of broken lines, cut anywhere."""
    rnd = draw(st.randoms(use_true_random=False))
    version = draw(st.sampled_from((4, 5, 5, 6, 6, 6, 6, 7, 3, 0)))  # 0: no metadata line
    rings = draw(st.sampled_from((1, 2, 4, 4, 4, 6)))
    max_depth = draw(st.sampled_from((2, 4, 8, 66)))
    n_scopes = draw(st.integers(0, 60 if max_depth < 60 else 90))
    p_break = draw(st.sampled_from((0.0, 0.0, 0.02, 0.1, 0.3)))
    breaks = draw(st.sampled_from((BREAKS, BREAKS[:12], ("crlf",), ("site_quote", "site_escape"), ("torn", "split"),
                                   ("backwards", "negative", "drop"))))
    caps = {"task_window": [rnd.choice((4, 8, 64, 1 << 14)) for _ in range(8)],
            "heap": [rnd.choice((0, 512, 1024, 4096, 1 << 28, 1 << 62)) for _ in range(8)],
            "dep_pool": [rnd.choice((8, 64, 1 << 14)) for _ in range(8)]}
    host_built = rnd.random() < 0.1  # another runtime: ring 0 for everything
    wrap = caps["heap"] if version in (4, 5) else None
    with_dp = version != 4 or rnd.random() < 0.2
    sites = SITES + ODD_SITES[:2] if rnd.random() < 0.1 else SITES
    state = {r: [0, 0, 0, 0, 0, 0] for r in range(rings)}
    recs: list[dict[str, Any]] = []
    stack: list[tuple[str, int]] = []
    opened = 0
    while opened < n_scopes or (stack and rnd.random() < 0.97):
        if stack and (opened >= n_scopes or len(stack) > max_depth or rnd.random() < 0.45):
            site, depth = stack.pop()
            phase = "end"
        else:
            depth, site = len(stack), rnd.choice(sites)
            stack.append((site, depth))
            phase = "begin"
            opened += 1
        ring = 0 if host_built else min(depth, rings - 1) if rnd.random() < 0.95 else rnd.randrange(rings)
        recs.append(_record(rnd, site, phase, depth, ring, state[ring], wrap, with_dp))
    meta = _meta_line(rnd, version or 6, rings, caps, len(recs))
    lines = [] if version == 0 else [meta]
    for rec in recs:
        if breaks and rnd.random() < p_break:
            lines += _broken(rnd.choice(breaks), rnd, rec, meta)
        else:
            lines.append(_encode(rec))
    data = (b"\xef\xbb\xbf" if rnd.random() < 0.05 else b"") + b"\n".join(lines)
    data += draw(st.sampled_from((b"\n", b"\n", b"", b"\n\n", b"\r\n")))
    if data and rnd.random() < 0.15:  # the file cut under the reader
        data = data[:rnd.randint(0, len(data))]
    return data


def cuts(rnd: random.Random, size: int) -> list[int]:
    """Chunk boundaries for ``size`` bytes: none, a few anywhere, or many small chunks."""
    kind = rnd.random()
    if size < 2 or kind < 0.2:
        return []
    if kind < 0.85:
        return sorted(rnd.sample(range(1, size), min(size - 1, rnd.randint(1, 8))))
    step = rnd.randint(1, 64)
    return list(range(step, size, step))


def chunks(data: bytes, at: list[int]) -> list[bytes]:
    bounds = [0, *at, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def metas(draw: st.DrawFn) -> Meta | None:
    if draw(st.booleans()):
        return None
    n = draw(st.integers(0, 5))
    caps = st.lists(st.sampled_from((0, 1, 7, 64, 4096, 1 << 62)), min_size=n, max_size=n)
    return Meta(version=draw(st.sampled_from((4, 5, 6))), fatal=False, dropped=0,
                total=draw(st.sampled_from((None, 0, 3, 120, 1 << 62))),  # the bands' first column width
                task_window_max=tuple(draw(caps)), heap_max=tuple(draw(caps)), dep_pool_max=tuple(draw(caps)),
                tensormap_max=draw(st.sampled_from((None, 0, 50))))


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    """Records in file order that pair, nest, cross rings and reach the depth cap, with counters of any
    size and sign and rings beyond the metadata (the decoder would reject many of them; the pairers must
    still agree).  Rings are never negative: the decoder never passes one, and Meta.capacity cannot take it."""
    rnd = draw(st.randoms(use_true_random=False))
    n = draw(st.integers(0, 120))
    base = draw(st.sampled_from((0, 0, 58)))  # 58: the stack reaches the collector's depth cap
    big = draw(st.sampled_from((1, 100, 1 << 40, 1 << 70)))
    same_ring = draw(st.booleans())
    out: list[Record] = []
    stack: list[tuple[str, int]] = []
    for line in range(2, n + 2):
        if stack and rnd.random() < 0.5:
            site, depth = stack.pop() if rnd.random() < 0.85 else (rnd.choice(SITES[:3]), rnd.randint(0, 64))
            phase = "end"
        else:
            depth = min(64, base + len(stack)) if rnd.random() < 0.85 else rnd.randint(0, 64)
            site = rnd.choice(SITES[:3])
            stack.append((site, depth))
            phase = "begin"
        counters = [rnd.randint(-2, big) if rnd.random() < 0.9 else rnd.randint(0, 3) for _ in range(6)]
        dps: int | None = counters[4] if rnd.random() < 0.9 else None
        dpe: int | None = counters[5] if rnd.random() < 0.9 else None
        ring = 1 if same_ring else rnd.choice((0, 1, 1, 2, 3, 5, 70))
        out.append(Record(line, site, phase, depth, ring, counters[0], counters[1],  # type: ignore[arg-type]
                          counters[2], counters[3], dps, dpe, rnd.randint(-1, 30)))
    return out
