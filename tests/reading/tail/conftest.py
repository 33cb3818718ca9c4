"""Fixtures for the tailing tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._writer import Writer, writer_fixture


@pytest.fixture
def writer() -> Iterator[Writer]:
    yield from writer_fixture()
