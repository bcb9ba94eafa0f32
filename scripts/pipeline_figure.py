"""Draw the pipeline figure of the docs: decoder -> Abduction -> Action -> OvR decision / <NUM> value.

Writes ``docs/assets/pipeline.svg`` (or ``--out PATH``; a ``.png`` suffix writes a PNG). The
figure is drawn with matplotlib alone (mathtext, no LaTeX), text as paths, so it renders the same
in any browser and offline. Run ``python scripts/pipeline_figure.py`` after changing it and commit
the SVG.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

OUT = Path(__file__).resolve().parents[1] / "docs" / "assets" / "pipeline.svg"

# (title, detail, fill colour): one box per stage, top to bottom
STAGES = [
    (
        "text with numbers",
        r"3 boxes of 12 eggs hold  $\rightarrow$  3 boxes of <NUM> eggs hold,  $v = 12$",
        "#eceff1",
    ),
    (
        "numeric embedding",
        r"$e_{x_i} + \mathrm{sign}(v_i)\,\ln(1+|v_i|)\,w_{\mathrm{num}}$",
        "#e3f2fd",
    ),
    ("decoder (Qwen2, Llama, ...), unchanged", r"features $z_i \in \mathbb{R}^H$", "#e3f2fd"),
    (
        "Abduction",
        r"$U_i \sim \mathrm{Cauchy}(\mathrm{loc}_{U_i},\ \mathrm{scale}_{U_i})$,  $C$ components",
        "#fff3e0",
    ),
    (
        "Action",
        r"$U'_i = U_i + $ noise of the mode;   "
        r"$S_i = W_{\mathrm{cls}} U'_i + b_{\mathrm{cls}}$,   "
        r"$Y_i = W_{\mathrm{reg}} \cdot U'_i + b_{\mathrm{reg}}$",
        "#fff3e0",
    ),
]
OUTPUTS = [
    (
        "next token: one-vs-rest",
        r"$P_{k} = P(S_{k} > C_k) = \frac{1}{2} + \frac{1}{\pi}\arctan\frac{\mathrm{loc}_{S_k} - C_k}{\mathrm{scale}_{S_k}}$",
        "#e8f5e9",
    ),
    (
        "the number, when <NUM> is chosen",
        r"$Y \sim \mathrm{Cauchy}(\mathrm{loc}_Y, \mathrm{scale}_Y)$ in $t = g(y) = \mathrm{sign}(y)\ln(1+|y|)$:"
        "\n"
        r"median $g^{-1}(\mathrm{loc}_Y)$, exact intervals",
        "#e8f5e9",
    ),
]


def _box(
    ax: plt.Axes, x: float, y: float, w: float, h: float, title: str, detail: str, fill: str
) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.01,rounding_size=0.02",
            linewidth=1.0,
            edgecolor="#455a64",
            facecolor=fill,
        )
    )
    ax.text(x + w / 2, y + h * 0.70, title, ha="center", va="center", fontsize=10.5, weight="bold")
    ax.text(x + w / 2, y + h * 0.32, detail, ha="center", va="center", fontsize=9.5)


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#455a64", lw=1.2)
    )


def draw(out: Path) -> Path:
    """Draw the figure into ``out`` (SVG or PNG by its suffix) and return the path."""
    plt.rcParams["svg.hashsalt"] = "cauchylin-pipeline"  # stable ids: the same file every run
    fig = plt.figure(figsize=(8.0, 6.4))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    h, gap, top = 0.105, 0.045, 0.975
    x, w = 0.08, 0.84
    ys = [top - h - i * (h + gap) for i in range(len(STAGES))]
    for (title, detail, fill), y in zip(STAGES, ys, strict=True):
        _box(ax, x, y, w, h, title, detail, fill)
    for upper, lower in itertools.pairwise(ys):
        _arrow(ax, (0.5, upper), (0.5, lower + h))
    y_out = ys[-1] - gap - 0.13
    ow = 0.455
    for i, (title, detail, fill) in enumerate(OUTPUTS):
        ox = 0.02 + i * (ow + 0.05)
        _box(ax, ox, y_out, ow, 0.13, title, detail, fill)
        _arrow(ax, (0.5, ys[-1]), (ox + ow / 2, y_out + 0.13))
    ax.text(
        0.5,
        0.012,
        "every step after the decoder is linear in Cauchy variables: closed-form laws, no sampling",
        ha="center",
        va="bottom",
        fontsize=9,
        style="italic",
        color="#37474f",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None, dpi=150)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output file (default {OUT})")
    print(f"wrote {draw(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
