"""Self-contained HTML pages: inline CSS, inline SVG figures, no network requests.

Every page wmeval writes (the scorecard, the sweep report) goes through :func:`page`, so that
it opens offline, years later, from a file: no scripts, fonts, stylesheets or images are
fetched; figures are matplotlib SVG inlined into the document (text kept as text).
"""

from __future__ import annotations

import contextlib
import html
import io
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;
 color:#1b1f24;background:#fff;line-height:1.45}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.6em;margin:.3em 0}h2{font-size:1.3em;margin-top:1.6em;border-bottom:2px solid #d0d7de}
h3{font-size:1.08em;margin-top:1.3em}
p.lede{font-size:1.02em;color:#333;max-width:70em}
.note{color:#57606a;font-size:.9em;max-width:80em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.86em}
th,td{border:1px solid #d0d7de;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f6f8fa;font-weight:600}
td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
td.best{background:#dafbe1;font-weight:600}
td.rk1{background:#dafbe1}td.rklast{background:#ffebe9}
td.changed{box-shadow:inset 0 0 0 2px #d4a72c}
td:first-child{white-space:nowrap}
.iv{color:#57606a;font-size:.92em}
.tag{display:inline-block;border-radius:3px;padding:0 5px;font-size:.8em;background:#eaeef2;color:#24292f}
.warn{background:#fff1e5;border-left:4px solid #bc4c00;padding:6px 10px;margin:8px 0}
.scroll{overflow-x:auto}
figure{margin:8px 0 16px;display:inline-block;vertical-align:top}
figure svg{max-width:100%;height:auto}
figcaption{font-size:.85em;color:#57606a;max-width:640px}
details{margin:4px 0 8px}summary{cursor:pointer;font-weight:600}
dl.card{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:.85em;margin:4px 0 10px}
dl.card dt{color:#57606a}dl.card dd{margin:0;word-break:break-all}
code{font-size:.92em}
nav a{margin-right:12px}
"""


def esc(value: object) -> str:
    """HTML-escape any value's ``str``."""
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    """A complete HTML document around ``body`` (already HTML), with the stylesheet inlined.

    The Content-Security-Policy forbids every fetch (``default-src 'none'``), inline styles
    excepted: a page that tried to load anything would show it as a console error.
    """
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n"
            "</body>\n</html>\n")


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, cell_classes: Iterable[Sequence[str]] | None = None,
          caption: str | None = None) -> str:
    """An HTML table; ``header`` and ``rows`` are HTML fragments (escape text with :func:`esc`).

    ``cell_classes``, where given, has one class string per cell of each row.
    """
    rows = [list(r) for r in rows]
    classes = [list(c) for c in cell_classes] if cell_classes is not None else [[""] * len(r) for r in rows]
    out = ["<div class=\"scroll\"><table>"]
    if caption:
        out.append(f"<caption class=\"note\">{caption}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr></thead><tbody>")
    for r, cls in zip(rows, classes):
        out.append("<tr>" + "".join(f"<td class=\"{c}\">{v}</td>" if c else f"<td>{v}</td>"
                                    for v, c in zip(r, cls)) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


#: Figures waiting to be rendered (inside :func:`deferred_figures`), each standing in the page as a placeholder:
#: ``("figure", fig, caption)`` (built, to draw) or ``("build", function, args, kwargs)`` (to build and draw).
_DEFERRED: list | None = None


@contextlib.contextmanager
def deferred_figures() -> Iterator[Callable[[str], str]]:
    """Inside, :func:`figure_svg` returns a placeholder and keeps the figure, and :func:`deferred_figure` keeps
    the call that builds one; the yielded function builds and renders every kept figure (in forked processes,
    :func:`wmeval.core.parallel.fork_map`: each figure's SVG is the same bytes wherever it is drawn) and puts them
    in place of their placeholders in a text."""
    import matplotlib
    import matplotlib.pyplot as plt

    global _DEFERRED
    previous, pending = _DEFERRED, []
    _DEFERRED = pending

    def render(i: int) -> str:
        global _DEFERRED
        item = pending[i]
        if item[0] == "figure":
            return _figure_svg(item[1], item[2])
        saved, _DEFERRED = _DEFERRED, None          # the build's own figure_svg draws at once
        try:
            return item[1](*item[2], **item[3])
        finally:
            _DEFERRED = saved

    def resolve(text: str) -> str:
        from wmeval.core.parallel import fork_map

        svgs = fork_map(render, list(range(len(pending))))
        # A build that made no figure ("") takes its line with it, as a figure block that was never added.
        return re.sub(r"<!--wmeval-figure-(\d+)-->(\n?)",
                      lambda m: svgs[int(m.group(1))] + m.group(2) if svgs[int(m.group(1))] else "", text)

    try:
        with matplotlib.rc_context({"figure.max_open_warning": 0}):      # every figure stays open until drawn
            yield resolve
    finally:
        for item in pending:
            if item[0] == "figure":
                plt.close(item[1])
        _DEFERRED = previous


def figure_svg(fig, caption: str | None = None) -> str:
    """A matplotlib figure as an inline ``<figure>`` with SVG (text kept as text); closes the figure. Inside
    :func:`deferred_figures`, a placeholder that its ``resolve`` replaces."""
    if _DEFERRED is not None:
        return _defer(("figure", fig, caption))
    return _figure_svg(fig, caption)


def deferred_figure(build: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """``build(*args, **kwargs)``: a function that makes a figure and returns its :func:`figure_svg` (or any other
    text, "" for none). Inside :func:`deferred_figures` the call waits for ``resolve`` and runs in its forked
    workers, building and drawing there (building the scorecard's 37 figures took 2 s of one process), with a
    placeholder in the page meanwhile; elsewhere it runs at once."""
    if _DEFERRED is None:
        return build(*args, **kwargs)
    return _defer(("build", build, args, kwargs))


def _defer(item: tuple) -> str:
    """Keep ``item`` for ``resolve``; its placeholder in the page."""
    _DEFERRED.append(item)
    return f"<!--wmeval-figure-{len(_DEFERRED) - 1}-->"


def _figure_svg(fig, caption: str | None) -> str:
    import matplotlib
    import matplotlib.pyplot as plt

    buf, tight = io.StringIO(), []
    # The tight bounding box (``bbox_inches="tight"``'s, padded alike), measured with the renderer of the one
    # draw that writes the SVG, which then shows that box through its viewBox: savefig's "tight" draws the
    # figure twice, the first time only to measure it (measured: 45% of the report's figure time).
    cid = fig.canvas.mpl_connect("draw_event", lambda event: tight.append(fig.get_tightbbox(event.renderer)))
    try:
        # savefig.bbox pinned: a matplotlibrc's "tight" would crop the canvas before the viewBox moves it.
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "wmeval", "savefig.bbox": "standard"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
    finally:
        fig.canvas.mpl_disconnect(cid)
        plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]            # drop the XML prolog and DOCTYPE: invalid inside HTML
    box = tight[-1].padded(matplotlib.rcParams["savefig.pad_inches"])
    x0, y0 = box.x0 * 72, (fig.get_figheight() - box.y1) * 72             # SVG user units: points, y down
    w, h = box.width * 72, box.height * 72
    svg, n = re.subn(r'width="[^"]*" height="[^"]*" viewBox="[^"]*"',
                     f'width="{_num(w)}pt" height="{_num(h)}pt" viewBox="{_num(x0)} {_num(y0)} {_num(w)} {_num(h)}"',
                     svg, count=1)
    if n != 1:
        raise RuntimeError(f"matplotlib's SVG header changed; cannot set its viewBox: {svg[:300]!r}")
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f"<figure>{svg}{cap}</figure>"


def _num(v: float) -> str:
    """A coordinate as matplotlib writes them (6 decimals, trailing zeros dropped)."""
    return f"{v:.6f}".rstrip("0").rstrip(".")


def new_figure(width: float = 5.2, height: float = 3.2, ncols: int = 1):
    """A matplotlib figure on the non-interactive Agg backend (no display needed): ``(fig, axes)``.

    ``axes`` is one Axes for ``ncols = 1``, else an array of ``ncols``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width, height), squeeze=True)
