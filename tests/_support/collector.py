"""What the runtime's scope_stats collector writes for a program nested past its depth cap.

The collector keeps at most 64 open scopes (scope-stats-format.md, "Other writers and limits"): a
begin that would be the 65th is not recorded, but its end is, with the site and depth of the
innermost scope the collector holds, and it pops that scope.  :func:`collected` plays a program
through that rule; :func:`deep_program` is the program the depth-cap tests use.
"""

from __future__ import annotations

from typing import Any

from tests._support.scope_stats import rec

CAP = 64
"""Open scopes the collector keeps (depths 0..63)."""

Step = tuple[str, str, int, int]
"""(site, phase, true depth, heap bytes the scope allocates on its own ring right after its begin)."""


def collected(program: list[Step]) -> list[dict[str, Any]]:
    """The records the collector writes for ``program`` (no metadata line).

    Each scope allocates on ring ``min(true depth, 3)``: one task-window slot, ``bytes`` of heap and
    one dep-pool entry, never reclaimed (tails stay at 0, 1 for the dep pool).  A record samples the
    ring of the scope it is attributed to.  An end with nothing left on the collector's stack is not
    written.
    """
    heads = {r: [0, 0, 1] for r in range(4)}  # task window, heap, dep pool heads per ring
    stack: list[tuple[str, int]] = []
    out: list[dict[str, Any]] = []

    def sample(site: str, phase: str, depth: int) -> dict[str, Any]:
        tw, heap, dp = heads[min(depth, 3)]
        return rec(site, phase, depth, tw=(0, tw), heap=(0, heap), dp=(1, dp))

    for site, phase, depth, nbytes in program:
        if phase == "begin":
            if len(stack) < CAP:
                stack.append((site, depth))
                out.append(sample(site, "begin", depth))
            if nbytes:
                h = heads[min(depth, 3)]
                h[0], h[1], h[2] = h[0] + 1, h[1] + nbytes, h[2] + 1
        elif stack:
            top_site, top_depth = stack.pop()  # the end is the innermost kept scope's, whoever it was
            out.append(sample(top_site, "end", top_depth))
    return out


def deep_program(depth: int, *, pre: int = 400, post: int = 900, innermost: int = 600) -> list[Step]:
    """A root; a depth-1 scope ``pre`` allocating ``pre`` bytes; a chain of scopes ``chain:1`` ..
    ``chain:<depth - 1>`` (8 bytes each, the innermost ``innermost``); then a depth-1 scope ``post``
    allocating ``post`` bytes.  With ``depth`` <= 64 nothing is capped."""
    steps: list[Step] = [("(unknown):0", "begin", 0, 0), ("pre", "begin", 1, pre), ("pre", "end", 1, 0)]
    chain = [f"chain:{d}" for d in range(1, depth)]
    steps += [(s, "begin", d, innermost if d == depth - 1 else 8) for d, s in enumerate(chain, 1)]
    steps += [(s, "end", d, 0) for d, s in reversed(list(enumerate(chain, 1)))]
    steps += [("post", "begin", 1, post), ("post", "end", 1, 0), ("(unknown):0", "end", 0, 0)]
    return steps
