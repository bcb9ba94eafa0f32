"""Figures for the benchmark scripts (matplotlib, headless).

Each script measures, prints its table, and, given ``--plot PATH``, draws the same numbers with
the functions here. The figures on the documentation's benchmark page are these files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# One colour per side, the same in every figure.
OURS = "#3f51b5"
BASE = "#9e9e9e"
TARGET = "#e53935"


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str) -> str:
    """Lay out, write (120 dpi) and close a figure; create the folder if needed."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room for the footnote (two lines)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    print(f"wrote {path}")
    return path


def footnote(fig, text: str, width: int = 170) -> None:
    """The machine and the command, small, under the axes (wrapped to ``width`` characters)."""
    import textwrap

    wrapped = "\n".join(textwrap.wrap(text, width)) or text
    fig.text(0.01, 0.005, wrapped, fontsize=7, color="#616161", ha="left", va="bottom")


def label_bar(ax, x: float, top: float, text: str, fontsize: int = 8) -> None:
    """Write ``text`` just above a bar whose top is at ``(x, top)``."""
    ax.annotate(
        text,
        (x, top),
        ha="center",
        va="bottom",
        fontsize=fontsize,
        xytext=(0, 2),
        textcoords="offset points",
    )


def ratio_bars(
    ax,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    targets: Mapping[str, float] | None = None,
    ylabel: str = "ratio (ours / baseline)",
) -> None:
    """Grouped bars of ratios, one group per label, one bar per series, with the target lines.

    Args:
        ax: the matplotlib axes.
        groups: the x labels.
        series: ``{legend label: one ratio per group}``.
        targets: ``{label: ratio}`` drawn as dashed horizontal lines.
        ylabel: the y-axis label.
    """
    n_series = len(series)
    width = 0.8 / max(n_series, 1)
    palette = [OURS, "#7986cb", "#c5cae9", "#283593", "#00897b", "#80cbc4", "#f9a825", "#ffe082"]
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (n_series - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width * 0.95, label=label, color=palette[i % len(palette)])
        for bar, value in zip(bars, values, strict=True):
            label_bar(ax, bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{value:.2f}")
    ax.axhline(1.0, color="black", lw=0.8)
    for label, value in (targets or {}).items():
        ax.axhline(value, color=TARGET, lw=1, ls="--")
        ax.annotate(
            label,
            (len(groups) - 0.5, value),
            ha="right",
            va="bottom",
            fontsize=8,
            color=TARGET,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(1.4, *(v for vals in series.values() for v in vals)) * 1.15)
    if n_series > 3:  # many series: the legend beside the axes, not over the bars
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    elif n_series > 1:
        ax.legend(fontsize=8, loc="upper left")
