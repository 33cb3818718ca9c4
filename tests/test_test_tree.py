"""The test tree's own rules: tests mirror the package, and no test imports another test module.

Shared helpers live in ``tests/_support/`` (and the benchmarks' in ``tests/bench/common.py``), so a
test module can be read, moved or deleted alone.  Fixtures are found by pytest in ``conftest.py``
files, never imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
NOT_MIRRORS = {"_support", "bench", "deploy", "e2e", "fixtures", "golden"}
"""Test folders that are not a package's mirror: helpers, benchmarks, the deploy files, end-to-end
tests across every stage, and data."""


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.parts and "data" not in p.parts)


def imported_test_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` of a module under ``tests``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in ("tests", "tests.bench"):
                names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if n == "tests" or n.startswith("tests.")]
    return found


def is_test_module(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith(("test_", "bench_"))


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {mod}" for line, mod in imported_test_modules(path)
             if is_test_module(mod) or (mod.startswith("tests._support") is False and "_support" in path.parts)]
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_what_it_is_for(tmp_path: Path) -> None:
    bad = tmp_path / "test_x.py"
    bad.write_text("from tests.sinks.otlp.test_spans import FLOW\nimport tests.conftest\n"
                   "from tests.bench import bench_summary\nfrom tests._support.samples import SAMPLES\n")
    assert [m for _, m in imported_test_modules(bad) if is_test_module(m)] == [
        "tests.sinks.otlp.test_spans", "tests.conftest", "tests.bench.bench_summary"]


def test_tests_mirror_the_package() -> None:
    """Each test folder is named after a package of ``ringtrace`` and each package with code of its
    own has a test folder (or is named here with the reason)."""
    folders = {p.relative_to(TESTS) for p in TESTS.rglob("*") if p.is_dir() and "__pycache__" not in p.parts
               and not NOT_MIRRORS & set(p.relative_to(TESTS).parts)}
    packages = {p.parent.relative_to(ROOT / "ringtrace") for p in (ROOT / "ringtrace").rglob("__init__.py")
                if "_pb" not in p.parts} - {Path(".")}
    assert not folders - packages, f"test folders with no package: {sorted(map(str, folders - packages))}"
    untested = {str(p) for p in packages - folders}
    assert not untested, f"packages with no test folder: {sorted(untested)}"
