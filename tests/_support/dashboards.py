"""The shipped Grafana dashboards (deploy/grafana, written by build_dashboards.py) as the tests read them: every
panel target's and query variable's expression, and the dashboard variables substituted as Grafana does before
it sends a query.  promtool parses them (tests/deploy), a real Prometheus answers them (tests/e2e)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))


@dataclass(frozen=True)
class Query:
    dashboard: str  # the file's name
    title: str  # the panel's title, or "variable NAME"
    where: str  # the panel (id, title, refId) or the variable, for messages
    expr: str


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those of a collapsed row too."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queries(paths: list[Path] = DASHBOARDS) -> list[Query]:
    """Every panel target's expression and every query variable's series selector (``label_values(sel, label)``)."""
    out: list[Query] = []
    for path in paths:
        dash = load(path)
        for p in panels(dash):
            for t in p.get("targets", []):
                out.append(Query(path.name, p["title"], f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"]))
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"]["query"])
                assert m, var["query"]
                out.append(Query(path.name, f"variable {var['name']}", f"variable {var['name']}", m.group(1)))
    return out


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with each ``$name`` of ``values`` (keys without the ``$``) replaced; every variable must be given."""
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${name}", value)
    assert "$" not in expr, f"unknown variable in {expr!r}"
    return expr
