"""Stage 5, report: the scorecard (Markdown and one self-contained HTML page), plot data, protocol cards.

- :mod:`.scorecard`: the document, the interval table and the plot data;
- :mod:`.figures`: the scorecard's inline SVG figures.
"""

from wmeval.report.scorecard import interval_table, plot_data, protocol_cards, render

__all__ = ["interval_table", "plot_data", "protocol_cards", "render"]
