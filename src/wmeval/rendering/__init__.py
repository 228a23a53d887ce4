"""One document model rendered to Markdown and to a self-contained HTML page (scorecard, sweep report).

- :mod:`.document`: :class:`Doc` and :class:`Table`, :func:`to_markdown`, :func:`to_html`;
- :mod:`.htmlpage`: the page, table and inline-SVG figure primitives.
"""
