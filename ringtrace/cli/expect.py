"""``check --expect``: the ring sizes a run was meant to have, read from the flag and compared with what the
metadata line and the host log's ``Ring buffer sizes`` line say the runtime used."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ringtrace.model.records import RESOURCES, RunFinished
from ringtrace.model.runtime import BY_NAME, COMPILE_DEFAULTS, RINGS, fmt_amount

Expect = dict[str, tuple[int, ...]]
_NUMBER = re.compile(r"^(\d+)\s*(?:([kmgt])(?:i?b)?|b)?$", re.IGNORECASE)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ExpectError(ValueError):
    """A ``--expect`` value that cannot be read; the message says what is wrong (exit 2)."""


def parse_size(text: str) -> int:
    """``2G`` = 2 GiB, ``512K``, ``1MiB``, ``64``, ``2 * 1024 * 1024`` (binary units, as the runtime's sizes)."""
    value = 1
    for factor in text.split("*"):
        m = _NUMBER.match(factor.strip())
        if m is None:
            raise ExpectError(f"{text.strip()!r} is not a size (e.g. 16384, 512K, 2G, 2*1024*1024)")
        value *= int(m.group(1)) * (_UNITS[m.group(2).lower()] if m.group(2) else 1)
    return value


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def parse_expect(values: Sequence[str]) -> Expect:
    """``task_window=16,heap=(0,0,2G,0),dep_pool=0`` (repeatable) -> resource -> the 4 ring sizes expected.

    A scalar applies to all four rings; ``0`` stands for the compile default.  Raises :class:`ExpectError`.
    """
    out: Expect = {}
    for value in values:
        for item in _split_top(value):
            if not item.strip():
                continue
            name, eq, spec = item.partition("=")
            name, spec = name.strip(), spec.strip()
            if not eq or not spec:
                raise ExpectError(f"--expect {value}: {item.strip()!r} is not RESOURCE=SIZE "
                                  f"(e.g. task_window=16,heap=(0,0,2G,0))")
            if name not in RESOURCES:
                raise ExpectError(f"--expect {value}: unknown resource {name!r}; expected {', '.join(RESOURCES)}")
            if spec[0] in "([":
                if spec[-1] not in ")]":
                    raise ExpectError(f"--expect {value}: {spec!r}: unclosed tuple")
                rings = spec[1:-1].split(",")
                if len(rings) != RINGS:
                    raise ExpectError(f"--expect {value}: {name} needs one value or {RINGS} (one per ring), "
                                      f"got {len(rings)}")
            else:
                rings = [spec] * RINGS
            try:
                sizes = tuple(parse_size(r) or COMPILE_DEFAULTS[name] for r in rings)
            except ExpectError as err:
                raise ExpectError(f"--expect {value}: {name}: {err}") from None
            out[name] = sizes
    if not out:
        raise ExpectError("--expect: nothing to compare (e.g. --expect task_window=16,heap=2G)")
    return out


def _amount(resource: str, n: int) -> str:
    r = BY_NAME.get(resource)
    return f"{fmt_amount(resource, n)} ({n})" if r is not None and r.bytes and n >= 1024 else str(n)


def expect_reasons(fin: RunFinished, expect: Expect | None) -> list[str]:
    """``check --expect``: the sizes that differ from the metadata's or the log's ``Ring buffer sizes`` (each
    ring named, both values).  ``Ring buffer sizes`` is never required: ``--expect`` compares with the
    metadata alone when the log has no such line."""
    out: list[str] = []
    log = fin.host_log
    if not expect:
        return out
    meta = fin.summary.meta
    sizes = log.ring_sizes if log is not None else None
    for res, want in expect.items():
        have_meta: tuple[int, ...] = getattr(meta, f"{res}_max") if meta is not None else ()
        have_log: tuple[int, ...] = getattr(sizes, res) if sizes is not None else ()
        for ring, e in enumerate(want):
            m = have_meta[ring] if ring < len(have_meta) else None
            g = have_log[ring] if ring < len(have_log) else None
            if m is not None and m != e:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, the metadata says {_amount(res, m)}")
            if g is not None and g != e:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, the host log's 'Ring buffer sizes' "
                           f"line says {_amount(res, g)}")
            if m is None and g is None:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, but neither a metadata line nor a "
                           "host log 'Ring buffer sizes' line says what the runtime used")
    return out
