"""The report tests' Chromium: one browser per test module (``tests._support.report_page``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._support.report_page import Browser, browser


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with browser() as b:
        yield b
