"""The table of ``docs/commands.md`` ("Proof on the runtime itself"), from ``tests/fixtures/realsim/``:
``.venv/bin/python -m tests.analysis.realsim_table``.  Data only: what the tuning loop did on the runtime's
simulator and the bisected needs; nothing here runs the runtime."""

from __future__ import annotations

import json
from pathlib import Path

from ringtrace.model.runtime import COMPILE_DEFAULTS, CONFIG_KEYS, fmt_amount

REALSIM = Path(__file__).parents[1] / "fixtures" / "realsim"


def table() -> str:
    loops = json.loads((REALSIM / "loops.json").read_text())
    minima = json.loads((REALSIM / "minima.json").read_text())
    rows = ["| program (scene test) | runs to final | final sizes (ring: size) | need (one-resource minimum) | "
            "final / need | final RunConfig run again |", "|---|---|---|---|---|---|"]
    for prog in sorted(loops):
        loop = loops[prog]
        final = {}
        for res, key in CONFIG_KEYS.items():
            value = loop["confirm"]["run_config"].get(key, 0)
            for ring, v in enumerate(value if isinstance(value, list) else [value] * 4):
                final[(ring, res)] = v or COMPILE_DEFAULTS[res]
        needs = sorted((m for m in minima if m["program"] == prog), key=lambda m: (m["ring"], m["resource"]))
        sizes, need_cells, ratios = [], [], []
        for m in needs:
            got = final[(m["ring"], m["resource"])]
            sizes.append(f"{m['ring']}/{m['resource']}: {fmt_amount(m['resource'], got)}")
            need_cells.append(fmt_amount(m["resource"], m["min_pass"]))
            ratios.append(f"{got / m['min_pass']:.2f}")
        case = loop["case"].split("::", 1)[-1] if "::" in loop["case"] else loop["case"]
        runs = loop["confirm"]["runs"]
        done = sum(r["completed"] for r in runs)
        gave_up = sum(1 for r in runs if not r["completed"] and r.get("give_up"))
        outcome = f"completed {done} of {len(runs)}"
        if gave_up:
            outcome += f" ({gave_up} wall-clock give-up under load)"
        rows.append(f"| `{prog}` ({case}) | {len(loop['runs'])} | {'; '.join(sizes)} | {'; '.join(need_cells)} | "
                    f"{'; '.join(ratios)} | {outcome} |")
    return "\n".join(rows)



def outputs_table() -> str:
    """The user-folder table of ``docs/commands.md``: per case of ``tests/fixtures/realsim/outputs/`` its runs,
    ``advise outputs/``'s final sizes today, and the confirming runs (what was run again at a final answer)."""
    import contextlib
    import io

    from ringtrace.cli import main

    meta = json.loads((REALSIM / "outputs.json").read_text())
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["advise", "--format", "json", str(REALSIM / "outputs")])
    programs = {p["program"]: p for p in json.loads(buf.getvalue())["programs"]}
    rows = ["| case | runs (failed) | final sizes today (ring: size) | runs at a final answer (completed) |",
            "|---|---|---|---|"]
    for label in sorted({r["label"] for r in meta["runs"]}):
        runs = [r for r in meta["runs"] if r["label"] == label]
        p = programs[label]
        cells = [f"{a['ring']}/{a['resource']}: {fmt_amount(a['resource'], a['recommended'])}" for a in p["advice"]
                 if a["recommended"] is not None]
        confirms = [r for r in runs if r.get("confirm")]
        rows.append(f"| `{label}` | {len(runs)} ({sum(not r['completed'] for r in runs)}) | "
                    f"{'; '.join(cells) if p['final'] else 'not final'} | "
                    f"{len(confirms)} ({sum(bool(r['completed']) for r in confirms)}) |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(), outputs_table(), sep="\n\n")
