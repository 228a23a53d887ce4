"""Stage 5, report: the scorecard (Markdown and one self-contained HTML page), plot data, protocol cards.

- :mod:`.scorecard`: the document, the interval table and the plot data;
- :mod:`.cards`: protocol cards, assembled from the fields each metric declares in the registry;
- :mod:`.figures`: the scorecard's inline SVG figures.
"""

from wmeval.report.cards import protocol_cards
from wmeval.report.scorecard import interval_table, plot_data, render

__all__ = ["interval_table", "plot_data", "protocol_cards", "render"]
