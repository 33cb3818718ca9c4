"""Required external components: fail in CI, skip (with the reason) on a laptop.

``require(shutil.which("promtool") is not None, "promtool not installed (apt install prometheus)")``
calls :func:`pytest.fail` when the environment variable ``CI`` is ``true`` (or ``1``) and
:func:`pytest.skip` otherwise, so a missing Prometheus, Chromium or trace processor never
turns a CI run green by skipping.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(cond: bool, why: str) -> None:
    """Do nothing when ``cond`` holds; else fail (in CI) or skip (elsewhere) with ``why``."""
    if cond:
        return
    if in_ci():
        pytest.fail(f"required component missing in CI: {why}", pytrace=False)
    pytest.skip(why)
