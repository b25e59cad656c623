"""Which rows run forward and backward chunks in pairs that hide the EP all-to-all (and
DualPipe's PP sends), and what of that communication stays exposed (engine/overlap.py
paired_exposed, engine/schedules.py paired_share).

- DualPipe and DualPipeV as DeepSeek runs them: the pair overlaps computation with both the
  all-to-all and the PP sends (DeepSeek-V3 report §3.2.1). The reference schedules pair chunks
  only where the model supplies an overlapped forward-backward (deepseek-ai/DualPipe @3da1bbe
  dualpipe/dualpipe.py:23, dualpipev.py:23), so a framework profile that runs the schedule
  itself pairs them only where its ep_overlap names it (torchtitan's DualPipeV does not); a
  profile that does not run it leaves DeepSeek's own implementation, which pairs them.
- A framework's own pairing (its profile's ep_overlap: Megatron-Core's combined 1F1B under the
  interleaved schedule or without PP): the all-to-all only, not under full recompute unless
  the profile says so, with no more MTP modules than it allows, and only with EP > 1.
"""

from __future__ import annotations

import numpy as np

from planner.engine import activations as act
from planner.engine import overlap as ov
from planner.engine import schedules as sched
from planner.evaluation.candidates import (RECOMPUTE_CODES, SCHEDULE_CODES, Candidates, Problem,
                                           Shape)
from planner.specs.knobs import Layout
from planner.specs.framework import TimeBehaviour

DUALPIPES = ("dualpipe", "dualpipev")


def paired_rows(p: Problem, c: Candidates, x: Shape) -> tuple[np.ndarray, np.ndarray]:
    """(share of the pacing rank's chunks run in a pair, whether the pair hides PP's sends too)
    per row; 0 and False where nothing pairs."""
    fw = p.fw.time
    share = np.zeros(len(c.schedule))
    hides_pp = np.zeros(len(c.schedule), dtype=bool)
    for name in DUALPIPES:
        rows = c.schedule == SCHEDULE_CODES[name]
        if np.any(rows) and (name not in fw.pipeline_schedules or name in fw.ep_overlap):
            share = np.where(rows, sched.paired_share(name, x.pp, x.micro_batches, x.v), share)
            hides_pp |= rows
    own = framework_share(fw, x.pp, x.micro_batches, x.v, x.ep, c.schedule, c.recompute,
                          p.model.mtp_layers)
    return np.where(hides_pp, share, own), hides_pp


def framework_share(fw: TimeBehaviour, pp: np.ndarray, micro_batches: np.ndarray,
                    chunks: np.ndarray, ep: np.ndarray, schedule: np.ndarray,
                    recompute: np.ndarray, mtp_layers: int) -> np.ndarray:
    """The paired share under the framework's own pairing (its ep_overlap other than the
    DualPipes; schedule and recompute as Candidates codes), 0 where it does not pair."""
    share = np.zeros(np.shape(pp))
    if fw.ep_overlap_max_mtp_layers is not None and mtp_layers > fw.ep_overlap_max_mtp_layers:
        return share
    allowed = (ep > 1) & (fw.ep_overlap_under_full_recompute
                          | (recompute != act.RECOMPUTE_FULL))
    for name in fw.ep_overlap:
        if name in DUALPIPES:
            continue
        rows = allowed & ((pp == 1) if name == "no-pp"
                          else (pp > 1) & (schedule == SCHEDULE_CODES[name]))
        kind = "1f1b" if name == "no-pp" else name
        share = np.where(rows, sched.paired_share(kind, pp, micro_batches, chunks), share)
    return share


def layout_pairs(fw: TimeBehaviour, lay: Layout, micro_batches: int, mtp_layers: int) -> bool:
    """Whether the framework's own pairing runs this layout (framework_share > 0): where an
    exported launch switches it on."""
    one = lambda v: np.array([v], dtype=float)  # noqa: E731
    share = framework_share(fw, one(lay.pp), one(micro_batches), one(lay.chunks), one(lay.ep),
                            one(SCHEDULE_CODES[lay.schedule]),
                            one(RECOMPUTE_CODES[lay.recompute]), mtp_layers)
    return bool(share[0] > 0)


def exposed_ep_pp(p: Problem, c: Candidates, x: Shape, compute: np.ndarray, ep: np.ndarray,
                  pp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(EP, PP) per micro-batch left exposed: the paired share of their communication a hidden
    under the micro-batch's compute c with the hardware's comm_sm_fraction σ held by the
    communication kernels (overlap.paired_exposed), split back over EP and PP pro rata."""
    share, hides_pp = paired_rows(p, c, x)
    hidden_pp = np.where(hides_pp, pp, 0.0)
    a = ep + hidden_pp
    e = np.asarray(ov.paired_exposed(a, compute, share,
                                     p.hardware.efficiency.comm_sm_fraction), dtype=float)
    ratio = np.where(a > 0, e / np.where(a > 0, a, 1.0), 1.0)
    return ep * ratio, pp - hidden_pp + hidden_pp * ratio
