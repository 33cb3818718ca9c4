"""Fixtures for the reading tests (one-shot, the live app and the tailer below it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._support.agent import Proc
from tests._support.writer import Writer, writer_fixture


@pytest.fixture
def writer() -> Iterator[Writer]:
    """A real writer process for the test (closed at teardown)."""
    yield from writer_fixture()


@pytest.fixture
def agents() -> Iterator[list[Proc]]:
    """The processes a test starts (append each); any still running is killed at teardown."""
    started: list[Proc] = []
    yield started
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()
