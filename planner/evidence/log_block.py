"""A block of training-log lines read at once where it is only usual torchtitan step lines
(and lines no reader matches): one regex pass over the block's text instead of a dozen calls
per line, with exactly the per-line reader's result (planner.evidence.training).

A block qualifies when (1) none of the substrings that every other line matcher needs occurs
in it (TRIGGER_WORDS: Megatron-LM, NeMo, Trainer, DeepSpeed, nvidia-smi, the CUDA-capacity line),
so no other matcher fires on any line; (2) every line with "step:" is a USUAL line, and the
field keys occur once per such line and nowhere else (counted over the block), so the
per-line torchtitan reader would see, per line, the same step and the same memory, tps,
tflops and mfu tokens the USUAL groups hold (a USUAL match runs from its line's one
"step:" to the line's end, so the line's text before it holds no key); (3) every token converts. Otherwise the block is
read line by line (which also names any bad line)."""

from __future__ import annotations

import re
from typing import Any

from planner.evidence.source import MAX_LOG_NUMBER

NUM = r"[-+]?[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?\d+)?"
GIB = 2.0**30
# The substrings without which the other line matchers of training.py cannot match (each
# guards its matcher there); a line starting with "|" is nvidia-smi's table.
TRIGGER_WORDS = ("iteration", "memory (MB)", "time (ms)", "Effective Tera Flops",
                 "using world size:", " ..", " DeepSpeed Flops Profiler ", "CUDA capacity:",
                 "train_step_timing", "<", "'train_", "see_memory_usage]", "iter time (s):",
                 "CurrSamplesPerSec=")
# "step:" first (the scan jumps between its occurrences), its word boundary behind it
USUAL = re.compile(r"step:(?<=\bstep:)[ \t]*(\d+)[ \t]+loss:[ \t]*\S+(?:[ \t]+grad_norm:[ \t]*\S+)?"
                   r"[ \t]+memory:[ \t]*(" + NUM + r")GiB\((" + NUM + r")%\)[ \t]+tps:[ \t]*(\S+)"
                   r"[ \t]+tflops:[ \t]*(\S+)[ \t]+mfu:[ \t]*(\S+)[ \t]*$", re.M)
KEYS = ("step:", "memory:", "tps:", "tflops:", "mfu:")


def read_titan_block(f: Any, lines: list[str]) -> bool:
    """Apply a qualifying block's lines to the reader's state `f` (training._Found) as the
    per-line reader would, and say True; False (nothing applied) where it does not qualify."""
    text = "\n".join(lines)
    if "step:" not in text or "wps:" in text or any(w in text for w in TRIGGER_WORDS) \
            or text.startswith("|") or "\n|" in text:
        return False
    rows = USUAL.findall(text)
    if any(text.count(k) != len(rows) for k in KEYS):
        return False
    try:
        steps = [int(r[0]) for r in rows]
        gib = [float(r[1].replace(",", "")) for r in rows]
        share = [float(r[2].replace(",", "")) / 100.0 for r in rows]
        cols = [[float(r[i].removesuffix("%").replace(",", "")) for r in rows]
                for i in (3, 4, 5)]
    except ValueError:
        return False
    if any(len(r[0]) > 16 for r in rows) or not all(  # the line reader names the bad one
            abs(x) <= MAX_LOG_NUMBER for xs in (gib, share, *cols) for x in xs):
        return False
    f.fmt("torchtitan")
    f.peak(None, max(gib) * GIB)
    if f.memory.capacity_bytes is None:  # the first line with a share sets it, as line by line
        first = next((i for i, x in enumerate(share) if x > 0), None)
        if first is not None:
            f.memory.capacity_bytes = gib[first] * GIB / share[first]
    for name, col in zip(("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct"), cols):
        f.add_all(name, steps, col)
    return True
