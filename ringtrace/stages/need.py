"""What one run's records prove about the need of one ring and resource.  Pure.

The runtime's rules that make a figure a proof (the guide §2, the format doc's "Sizing facts", and
``runtime.DEP_POOL_BATCH``): a scope's tasks are released only at its exit, so everything an open scope's
own tasks hold is live at once (``Peak.pinned``; for the heap less what may be the skipped end of the
ring); a task window of N holds N - 1 tasks; one task's block must fit whole (``Peak.request``).  The dep
pool's figures are estimates only: how many entries a task takes depends on how many of its producers
have completed when it is wired (simpler's ``wire_fanin_task``), which depends on timing.  Occupancy
(``live``, ``live_at_exit``, ``high_water``) is never a need: reclaim is lazy, so an oversized ring keeps
everything.

The verdict (``stages.verdict``) and ``advise`` read these and nothing else as the records' evidence.
"""


from typing import NamedTuple

from ringtrace.model.records import Peak, RunSummary
from ringtrace.model.runtime import BY_NAME, Resource, fmt_amount


class Need(NamedTuple):
    """A need the records prove: at least ``value`` (a capacity: a window's count includes its free slot),
    and why, in a few words; value 0: nothing proven."""

    value: int
    why: str


NOTHING = Need(0, "")


def amount(r: Resource, n: int) -> str:
    """``n`` of ``r`` for a sentence: bytes as KiB/MiB/GiB, other counts with their unit (``12 entries``)."""
    return fmt_amount(r.name, n) if r.bytes else f"{n} {r.unit}"


def proven_need(p: Peak, s: RunSummary) -> Need:
    """The need of ``p``'s ring and resource that ``s``'s records prove (see the module docstring): not for a
    resource reclaimed in batches (``Resource.batch``, the dep pool), whose count is timing: a task takes an entry
    only for a producer that has not completed yet, so a run whose orchestrator waits takes fewer
    (:func:`dep_pool_estimate`).

    A run with dropped records proves nothing from its figures (pairs may be wrong); a wedged run's
    innermost ring also counts what its open scopes held when it stopped."""
    r = BY_NAME.get(p.resource)
    if r is None or r.batch or not p.scopes or (s.meta is not None and s.meta.dropped > 0):
        return NOTHING
    held = p.pinned
    if s.wedged and s.wedged[-1].ring == p.ring and p.open_pinned > held:
        held = p.open_pinned
    if r.holds_one_less:
        if held <= 0:
            return NOTHING
        return Need(held + 1, f"one scope's {held} {r.unit} were live at once (released only at its exit; a window "
                              f"of N holds N - 1)")
    best = NOTHING
    if held > 0:
        best = Need(held, f"one scope's tasks held {amount(r, held)} until it exited")
    if r.contiguous and p.request > best.value:
        best = Need(p.request, f"one task asked for {amount(r, p.request)} (a block must fit whole)")
    return best


def dep_pool_estimate(p: Peak, s: RunSummary) -> Need:
    """What a resource reclaimed in batches (``Resource.batch``: the dep pool) held in this run where nothing could
    be reclaimed yet (``Peak.batch``; or what open scopes held): an estimate of the need, not a proof (see
    :func:`proven_need`); on the runtime the smallest dep pool that completes was this figure or one more, or,
    with wide fan-ins, well below it."""
    r = BY_NAME.get(p.resource)
    if r is None or not r.batch or not p.scopes or (s.meta is not None and s.meta.dropped > 0):
        return NOTHING
    held = max(p.pinned, p.batch, p.open_pinned if s.wedged and s.wedged[-1].ring == p.ring else 0)
    if held <= 0:
        return NOTHING
    return Need(held, f"{amount(r, held)} were live before the pool could be reclaimed (the {r.words} is reclaimed "
                      f"only after {r.batch} tasks retire)")
