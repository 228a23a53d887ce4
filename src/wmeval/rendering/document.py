"""A small document model rendered twice: Markdown and one self-contained HTML page.

The scorecard and the sweep report are built once as blocks (headings, paragraphs, tables of
text cells, figures) and rendered to Markdown (fit for a README or a paper appendix) and to HTML
through :func:`wmeval.rendering.htmlpage.page` (inline CSS and SVG, nothing fetched). Text is inline
Markdown: `code` and **bold**; everything else is escaped in the HTML.
"""

from __future__ import annotations

import html as _html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from wmeval.rendering.htmlpage import page
from wmeval.rendering.htmlpage import table as html_table

#: Below this, a positive lower end is the mark of an interval open at 0, written (0, high] (:func:`~wmeval.
#: estimators.resample.with_zero_test` raises a lower end at or below 0 to the smallest positive double where its
#: permutation test rejects 0).
OPEN_AT_ZERO = 1e-300


@dataclass
class Table:
    """A table of text cells (inline Markdown: `code`, **bold**); ``classes`` per cell for the HTML."""

    header: list[str]
    rows: list[list[str]]
    classes: list[list[str]] = field(default_factory=list)


@dataclass
class Doc:
    """Blocks: ``(kind, payload)`` with kind ``h1``..``h4``, ``p`` (text, css class), ``table``,
    ``figure`` (HTML only), ``html`` (HTML only) or ``md`` (Markdown only)."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append((f"h{level}", text))

    def p(self, text: str, cls: str = "") -> None:
        """A paragraph; ``cls`` is its HTML class (``warn`` is also a Markdown quote)."""
        if text:
            self.blocks.append(("p", (text, cls)))

    def table(self, t: Table | None) -> None:
        if t is not None and t.rows:
            self.blocks.append(("table", t))

    def figure(self, svg_html: str) -> None:
        if svg_html:
            self.blocks.append(("figure", svg_html))

    def html(self, raw: str) -> None:
        self.blocks.append(("html", raw))

    def md(self, raw: str) -> None:
        self.blocks.append(("md", raw))


HEADINGS = ("h1", "h2", "h3", "h4")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _md_cell(text: str, cls: str) -> str:
    text = text.replace("|", "\\|")
    return f"**{text}**" if "best" in cls.split() else text


def to_markdown(doc: Doc) -> str:
    out: list[str] = []
    for kind, x in doc.blocks:
        if kind in HEADINGS:
            out += ["#" * int(kind[1]) + " " + x, ""]
        elif kind == "p":
            out += [("> " if x[1] == "warn" else "") + x[0], ""]
        elif kind == "md":
            out += [x, ""]
        elif kind == "table":
            cls = x.classes or [[""] * len(r) for r in x.rows]
            out += ["| " + " | ".join(x.header) + " |", "|" + "---|" * len(x.header)]
            out += ["| " + " | ".join(_md_cell(c, k) for c, k in zip(r, kr)) + " |" for r, kr in zip(x.rows, cls)]
            out.append("")
    return "\n".join(out)


def inline(text: str) -> str:
    """Inline Markdown (`code`, **bold**) to HTML, everything else escaped."""
    t = _html.escape(text, quote=False)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)


def _html_cell(text: str) -> str:
    # The interval of a "point [low, high]" cell (or "point (0, high]", open at 0) in a muted span.
    return re.sub(r"\[[^\[\]]*\]|\(0, [^\[\]()]*\]", lambda m: f'<span class="iv">{m.group(0)}</span>', inline(text))


def to_html(doc: Doc, title: str) -> str:
    out: list[str] = []
    for kind, x in doc.blocks:
        if kind in HEADINGS:
            out.append(f'<{kind} id="{slug(x)}">{inline(x)}</{kind}>')
        elif kind == "p":
            out.append(f'<p class="{x[1]}">{inline(x[0])}</p>' if x[1] else f"<p>{inline(x[0])}</p>")
        elif kind == "table":
            cls = x.classes or [[""] * len(r) for r in x.rows]
            out.append(html_table([inline(h) for h in x.header], [[_html_cell(c) for c in r] for r in x.rows],
                                  cell_classes=cls))
        elif kind in ("figure", "html"):
            out.append(x)
    return page(title, "\n".join(out))


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``); lists become JSON text."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list):
        out[prefix[:-1]] = json.dumps(d)
    else:
        out[prefix[:-1]] = d
    return out
