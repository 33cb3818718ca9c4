"""The report's page: ``page.html`` with ``page.css`` and the scripts inlined (nothing is loaded from anywhere).

The script is :data:`SCRIPTS` concatenated in order inside one function scope (``page.util.js`` defines
what the others use; ``page.js`` runs the page).  ``__DATA__`` is replaced by the report's JSON and
``__TITLE__`` by its (escaped) title.  Read from the package once per call of :func:`page` (no module state).
"""

from __future__ import annotations

from importlib.resources import files

SCRIPTS = ("page.util.js", "page.chart.js", "page.failure.js", "page.sizing.js", "page.overview.js", "page.js")


def page() -> str:
    """The page template with its style and script in place."""
    here = files("ringtrace.report")
    html = here.joinpath("page.html").read_text(encoding="utf-8")
    js = "".join(here.joinpath(name).read_text(encoding="utf-8") for name in SCRIPTS)
    return (html.replace("__CSS__", here.joinpath("page.css").read_text(encoding="utf-8"))
                .replace("__JS__", '(function () {\n"use strict";\n' + js + "})();\n"))
