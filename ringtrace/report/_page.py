"""The report's page: ``page.html`` with ``page.css`` and ``page.js`` inlined (nothing is loaded from anywhere).

``__DATA__`` is replaced by the report's JSON and ``__TITLE__`` by its (escaped) title.  Read from the
package once per call of :func:`page` (no module state).
"""

from __future__ import annotations

from importlib.resources import files


def page() -> str:
    """The page template with its style and script in place."""
    here = files("ringtrace.report")
    html = here.joinpath("page.html").read_text(encoding="utf-8")
    return (html.replace("__CSS__", here.joinpath("page.css").read_text(encoding="utf-8"))
                .replace("__JS__", here.joinpath("page.js").read_text(encoding="utf-8")))
