"""The C sources' copy of the Python tables (``ringtrace/stages/_core_src/tables.h``) is the one the tables
write today: a table changed without ``make core-header`` fails here."""

from __future__ import annotations

import pytest

from ringtrace.model.runtime import TABLE
from ringtrace.stages import core_header


def test_the_header_is_written_from_the_tables_of_today() -> None:
    assert core_header.PATH.read_text() == core_header.text(), "stale: run `make core-header`"


def test_a_changed_table_changes_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the staleness check rests on: the header follows the tables (a fourth resource, a deeper runtime)."""
    before = core_header.text()
    monkeypatch.setattr(core_header, "TABLE", (*TABLE, TABLE[0]._replace(name="fourth", since_version=7)))
    monkeypatch.setattr(core_header, "MAX_DEPTH", 128)
    after = core_header.text()
    assert after != before
    assert "#define RT_RESOURCES 4\n" in after and '#define RT_RESOURCE_3 "fourth"\n' in after
    assert "#define RT_SINCE_VERSIONS 4, 4, 5, 7\n" in after and "#define RT_MAX_DEPTH 128 " in after
