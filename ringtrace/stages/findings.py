"""The catalogue of findings: every rule ``diagnose`` can report, once, with its severity, whether it can fail
``check`` (through the run's verdict), what it rests on and its doc text.  ``docs/reference.md``'s findings
table is generated from :data:`RULES` (``docs/generate.py``).  Pure data.
"""


from typing import NamedTuple

from ringtrace.model.records import Severity


class Rule(NamedTuple):
    """One finding's rule.  ``fails_check``: a run with this finding has an ``error`` verdict."""

    name: str
    severity: Severity
    fails_check: bool
    rests_on: str
    doc: str


RULES: tuple[Rule, ...] = (
    Rule("failed", "error", True, "the run's host log",
         "the host log reports a failure (an orch_error_code or sched_error_code, a FATAL line, a deadlock "
         "report); the code, the ring and what the report says, and whether sizing can fix it"),
    Rule("wedged", "error", True, "the records (every record read, scopes left open) and the host log",
         "the run stopped inside the innermost open scope; the likely orch_error_code from the ring's counters "
         "at the last sample, confirmed or overruled by the host log"),
    Rule("cut_short", "error", True, "the metadata's total and dropped against the records read",
         "fewer records than the metadata promises (total - dropped): the file is cut or still being written; "
         "the open scopes are not called wedged and no error code is guessed"),
    Rule("test_failed", "error", True, "the scene test's result line in the host log",
         "the run completed but its test failed on numbers (Golden mismatch): its sizes sufficed, not a ring "
         "problem"),
    Rule("fatal", "error", True, "the metadata's fatal flag",
         "a fatal was latched mid-run (\"fatal\": true): records after it are diagnostic only"),
    Rule("no_headroom", "warning", False, "a need the records prove (ringtrace.stages.need)",
         "the records prove a need equal to the ring's capacity (a window of N holds N - 1): the run completed "
         "with nothing to spare; a longer run needs more"),
    Rule("near_capacity", "warning", False, "a need the records prove, or the tensormap's peak",
         "a proven need at or above --near of capacity (default 80%)"),
    Rule("other_run_log", "info", False, "the host log beside the file and the file's records",
         "a host log in the file's folder reports a failure although the file completed (the runtime writes no "
         "file for a failed run): it is another run's log, reported as a run of its own"),
    Rule("dropped", "warning", False, "the metadata's dropped count",
         "records were dropped by the collector (back-pressure): peaks are lower bounds"),
    Rule("parse_errors", "warning", False, "the lines that could not be read",
         "lines that could not be read; the figures cover the rest"),
    Rule("unmatched", "warning", False, "the pairing", "begins or ends that did not pair although nothing was "
         "reported dropped"),
    Rule("depth_cap", "warning", False, "the records' depth",
         "scopes nest 64 deep: the collector keeps at most 64 open scopes, so pairing past that may be shifted; "
         "the figures are lower bounds"),
    Rule("auto_scope_collapse", "warning", False, "needs the records prove on every ring",
         "one ring's proven need near capacity while the other rings carry nothing: auto-scope collapse or all "
         "work at one depth (guide §3)"),
    Rule("deep_nesting", "info", False, "the records' depth",
         "scopes nest deeper than 3: ring 3 is a clamp; a warning when ring 3's proven need is near capacity"),
    Rule("ring_sizes_mismatch", "warning", False, "the host log's 'Ring buffer sizes' line and the metadata",
         "the log's sizes and the metadata's disagree: the log and the records may be from different runs"),
)
"""Every rule, in the order of the reference table."""

BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
