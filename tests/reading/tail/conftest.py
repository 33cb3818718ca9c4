"""Fixtures for the tailing tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._writer import Writer, writer_fixture
from tests.reading.tail.test_faults import Agent


@pytest.fixture
def writer() -> Iterator[Writer]:
    yield from writer_fixture()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    """The watch agents a test starts (append each); any still running is killed at teardown."""
    started: list[Agent] = []
    yield started
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()
