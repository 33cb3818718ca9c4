"""The C side's copy of the Python tables: ``ringtrace/stages/_core_src/tables.h``, written from them.

The compiled parts (the reading core, ``_core_src/*.c``, and the Perfetto encoder, ``sinks/perfetto/_encode.c``)
take every constant they share with Python from that header: the depth limits, the dep pool's batch, the
resources (their number, names, first versions) and the fields of :class:`~ringtrace.model.records.Record` in
order.  It is generated (``make core-header``, which runs this module) and committed, so a build needs no
Python step; ``tests/stages/test_core_header.py`` fails when it is stale (docs/design.md says why a header
and not a check at import).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ringtrace.model.records import Record
from ringtrace.model.runtime import DEP_POOL_BATCH, TABLE
from ringtrace.stages.decode import MAX_DEPTH
from ringtrace.stages.pair import DEPTH_CAP, NEST

PATH = Path(__file__).with_name("_core_src") / "tables.h"


def _strings(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def text() -> str:
    """The header, as the Python tables say it today."""
    fields = Record.__struct_fields__
    lines = [
        "/* ringtrace's tables for its C sources, written from the Python tables by `make core-header`",
        " * (python -m ringtrace.stages.core_header): do not edit.  tests/stages/test_core_header.py fails when",
        " * it is stale. */",
        "#ifndef RINGTRACE_TABLES_H",
        "#define RINGTRACE_TABLES_H",
        "",
        f"#define RT_MAX_DEPTH {MAX_DEPTH} /* ringtrace.stages.decode.MAX_DEPTH */",
        f"#define RT_DEPTH_CAP {DEPTH_CAP} /* ringtrace.stages.pair.DEPTH_CAP */",
        f"#define RT_NEST {NEST} /* ringtrace.stages.pair.NEST */",
        f"#define RT_DEP_POOL_BATCH {DEP_POOL_BATCH} /* ringtrace.model.runtime.DEP_POOL_BATCH */",
        "",
        "/* ringtrace.model.runtime.TABLE: the per-ring resources in report order, and their first versions */",
        f"#define RT_RESOURCES {len(TABLE)}",
        f"#define RT_RESOURCE_NAMES {_strings([r.name for r in TABLE])}",
        f"#define RT_SINCE_VERSIONS {', '.join(str(r.since_version) for r in TABLE)}",
        *(f'#define RT_RESOURCE_{i} "{r.name}"' for i, r in enumerate(TABLE)),
        "",
        "/* ringtrace.model.records.Record: its fields, in order (the core builds records positionally) */",
        f"#define RT_RECORD_FIELDS {len(fields)}",
        *(f"#define RT_RECORD_{name.upper()} {i}" for i, name in enumerate(fields)),
        "",
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write the header; say whether it changed."""
    new = text()
    old = PATH.read_text() if PATH.exists() else ""
    if new != old:
        PATH.write_text(new)
    print(f"{PATH.relative_to(Path.cwd()) if PATH.is_relative_to(Path.cwd()) else PATH}: "
          f"{'written' if new != old else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
