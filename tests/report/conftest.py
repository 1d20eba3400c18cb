"""Figures kept in memory (drawn as when saved, under the plot's own style) instead of written."""

import matplotlib.pyplot as plt
import pytest

from lmprobe.report import plots, radar, scope_plots


@pytest.fixture
def drawn(monkeypatch):
    """The figures the report modules would save, drawn, in the order they were made."""
    figures = []

    def keep(fig, path):
        fig.canvas.draw()
        figures.append(fig)

    for module in (plots, scope_plots, radar):
        monkeypatch.setattr(module, "save_figure", keep)
    yield figures
    for fig in figures:
        plt.close(fig)
