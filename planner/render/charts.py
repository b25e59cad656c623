"""Charts for the design review, drawn with matplotlib into SVG text.

matplotlib is optional (the ``report`` extra) and imported only inside these functions, so the
rest of dtplan never pays for it. Charts hold no arithmetic: they draw numbers computed
elsewhere (the estimate, ``pipeline_schedule.pipeline_timeline``, ``engine.checkpoint``).
SVG output keeps text as text (``svg.fonttype = none``: no embedded or fetched fonts) and is
made deterministic (fixed ``svg.hashsalt``, no date in the metadata).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from types import ModuleType
from typing import Any

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6"]


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt() -> ModuleType:
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "dtplan",
                                "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False})
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Date": None, "Creator": "dtplan", "Format": None, "Type": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]                                   # no XML prolog / DOCTYPE
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)


def memory_chart(e: Any) -> str:
    """Stacked bars: per-GPU memory items on each pipeline stage, against usable memory."""
    from planner.render.estimate import ITEM_LABELS
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    names = [s.name for s in e.stages]
    bottom = [0.0] * len(names)
    for i, (key, label) in enumerate(ITEM_LABELS.items()):
        vals = [s.items[key] / 1e9 for s in e.stages]
        if max(vals) <= 0:
            continue
        ax.bar(names, vals, bottom=bottom, label=label, color=PALETTE[i % len(PALETTE)], width=0.55)
        bottom = [b + x for b, x in zip(bottom, vals)]
    ax.axhline(e.usable_memory_bytes / 1e9, color="#333", ls="--", lw=1)
    ax.text(len(names) - 0.5, e.usable_memory_bytes / 1e9, " usable", va="bottom", ha="right",
            fontsize=8)
    ax.set_ylabel("GB per GPU")
    ax.set_ylim(0, max(max(bottom), e.usable_memory_bytes / 1e9) * 1.1)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _svg(fig)


def step_time_chart(e: Any) -> str:
    """Horizontal bars: each component of the step time, in milliseconds."""
    from planner.render.estimate import TIME_LABELS
    plt = _plt()
    items = [(TIME_LABELS[k], x * 1e3) for k, x in e.breakdown.items() if x > 0]
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(items) + 0.8))
    labels = [a for a, _ in items][::-1]
    vals = [b for _, b in items][::-1]
    ax.barh(labels, vals, color=PALETTE[0])
    for y, x in enumerate(vals):
        ax.text(x, y, f" {x:,.0f}", va="center", fontsize=7)
    ax.set_xlabel(f"ms per step (total {e.step_time_s * 1e3:,.0f} ms)")
    return _svg(fig)


def pipeline_chart(blocks: list, p: int, m: int, v: int, schedule: str) -> str:
    """The schedule as a timeline: stages on y, time on x, forward and backward blocks labelled
    with their micro-batch (and chunk when interleaved)."""
    plt = _plt()
    span = max(b.end for b in blocks)
    fig, ax = plt.subplots(figsize=(7.5, 0.4 * p + 1.0))
    for b in blocks:
        shade = 0.55 + 0.45 * (b.chunk / max(v - 1, 1)) if v > 1 else 1.0
        color = "#4e79a7" if b.kind == "F" else "#f28e2b"
        ax.broken_barh([(b.start, b.end - b.start)], (b.stage - 0.4, 0.8), facecolors=color,
                       edgecolors="white", linewidth=0.5, alpha=shade)
        if (b.end - b.start) * 60 / span >= 1.2:
            ax.text((b.start + b.end) / 2, b.stage, str(b.micro_batch + 1), ha="center",
                    va="center", fontsize=6, color="white")
    ax.set_yticks(range(p), [f"stage {i}" for i in range(p)])
    ax.invert_yaxis()
    ax.set_xlim(0, span)
    ax.set_xlabel("time (one stage's forward pass = 1)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color="#4e79a7", label="forward"), Patch(color="#f28e2b", label="backward")],
              fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, frameon=False)
    ax.set_title(f"{schedule}: p = {p}, m = {m}" + (f", v = {v}" if v > 1 else ""), fontsize=9)
    return _svg(fig)


def checkpoint_chart(intervals_s: Iterable[float], waste: Iterable[float], optimum_s: float,
                     optimum_waste: float, stated_s: float | None = None) -> str:
    """Wasted fraction against the checkpoint interval (log x), the optimum marked."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot([t / 60 for t in intervals_s], [w * 100 for w in waste], color=PALETTE[0])
    ax.plot([optimum_s / 60], [optimum_waste * 100], "o", color=PALETTE[2])
    ax.annotate(f"optimum {optimum_s / 60:.0f} min, {optimum_waste:.1%}",
                (optimum_s / 60, optimum_waste * 100), textcoords="offset points", xytext=(6, 8),
                fontsize=8)
    if stated_s:
        ax.axvline(stated_s / 60, color="#333", ls="--", lw=1)
        ax.text(stated_s / 60, ax.get_ylim()[1], " plan", va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (min)")
    ax.set_ylabel("time wasted (%)")
    return _svg(fig)


def scaling_chart(plan_rows: list[dict], best_rows: list[dict], chosen: int,
                  ideal: list[float | None]) -> str:
    """Throughput against GPUs on log-log axes: the plan's own layout (DP scaled), the ideal line
    (``ideal``: linear through the plan's point, per plan row) and the search's best layout at
    each count."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    ok = [r for r in plan_rows if r["fits"]]
    base = next((r for r in ok if r["gpus"] == chosen), None)
    xs = [r["gpus"] for r in plan_rows]
    if base is not None:
        ends = (xs.index(min(xs)), xs.index(max(xs)))
        ys = [ideal[i] for i in ends]   # all set when the plan's own count fits
        ax.plot([xs[i] for i in ends], [y / 1e3 for y in ys if y is not None],
                ls="--", color="#999", lw=1, label="ideal (linear from the plan)")
    ax.plot([r["gpus"] for r in ok], [r["tokens_per_s"] / 1e3 for r in ok], "o-", color=PALETTE[0],
            label="the plan's layout, DP scaled")
    for r in ok:
        ax.annotate(f"MFU {r['mfu']:.0%}", (r["gpus"], r["tokens_per_s"] / 1e3),
                    textcoords="offset points", xytext=(4, -10), fontsize=7)
    bok = [r for r in best_rows if r["fits"]]
    ax.plot([r["gpus"] for r in bok], [r["tokens_per_s"] / 1e3 for r in bok], "s:", ms=4,
            color=PALETTE[1], label="best layout at each count")
    if base is not None:
        ax.plot([chosen], [base["tokens_per_s"] / 1e3], "*", ms=12, color=PALETTE[2], label="the plan")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(n) for n in xs])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("thousand tokens/s")
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    return _svg(fig)


def pareto_chart(points: dict, plan: tuple[float, float]) -> str:
    """Step time against peak memory for every valid layout; the Pareto front joined, the plan
    starred."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    mem = [x / 1e9 for x in points["peak_memory_bytes"]]
    step = list(points["step_time_s"])
    ax.scatter(mem, step, s=6, color="#bbb", label=f"valid layouts ({len(mem)})")
    front = sorted(points["front"], key=lambda i: mem[i])
    ax.plot([mem[i] for i in front], [step[i] for i in front], "o-", ms=3, color=PALETTE[0],
            label="Pareto front")
    ax.plot([plan[0] / 1e9], [plan[1]], "*", ms=13, color=PALETTE[2], label="the plan")
    ax.set_xlabel("peak memory per GPU (GB)")
    ax.set_ylabel("step time (s)")
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig)
