"""The readers' speed-ups change nothing they return (issue 18): a training log read a block
at a time (usual torchtitan step lines at once, evidence.log_block) equals the same log read
line by line, for generated logs mixing usual, unusual and broken step lines with other
frameworks' lines, in blocks of a few lines; and lines cleaned behind their guards equal the
unguarded cleaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.evidence.source as source
import planner.evidence.training as training
from planner.errors import InputError

USUAL = ("[rank0]:[titan] 2026-01-05 12:00:00,000 - root - INFO - step: {i}  loss: 7.1  "
         "{extra}memory: {m}GiB({p}%)  tps: {t}  tflops: 389.87  mfu: 39.42%")
OTHER = [
    "step: {i}  loss: 2.0  wps: 1,000  mfu: 3%",                            # the old name
    "step: {i}  loss: 2.0  tps: 5  tps: 6",                                  # a field twice
    "step: {i}  loss: 2.0  memory: 80GiB  tps: 5",                           # bad memory
    "step: {i}  loss: 2.0  tps: x5",                                         # bad number
    "step: {i}  loss: 2.0  tflops: 4",                                       # no tps
    "xstep: {i}  loss: 2.0  tps: 4",                                         # not a word
    " iteration {i}/ 100 | elapsed time per iteration (ms): 12.5 |",        # Megatron-LM
    "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:1A:00.0 Off |",   # nvidia-smi
    "[titan] CUDA capacity: NVIDIA H100 with 79.11GiB memory",
    "some other text",
    "",
]


def _line(draw_kind: int, i: int, m: str, p: str, t: str, extra: bool) -> str:
    if draw_kind < len(OTHER):
        return OTHER[draw_kind].format(i=i)
    return USUAL.format(i=i, m=m, p=p, t=t, extra="grad_norm:  8.3  " if extra else "")


LINES = st.lists(st.tuples(st.integers(0, 2 * len(OTHER)), st.integers(0, 60),
                           st.sampled_from(["81.85", "1,024.5", "0"]),
                           st.sampled_from(["86.17", "0", "50"]),
                           st.sampled_from(["1,874", "2.5e3", "7"]), st.booleans()),
                 min_size=1, max_size=40)


def _read(path: Path, data: bytes) -> str:
    try:
        return json.dumps(training.read_training(path, data).to_dict(), sort_keys=True)
    except InputError as e:
        return f"error {e}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=LINES, block=st.sampled_from([1, 60, 400, 1 << 20]), newline=st.booleans())
def test_a_log_read_a_block_at_a_time_equals_it_read_line_by_line(tmp_path_factory, rows,
                                                                    block, newline):
    text = "\n".join(_line(k, i, m, p, t, x) for k, i, m, p, t, x in rows) + ("\n" if newline
                                                                               else "")
    path = tmp_path_factory.mktemp("log") / "train.log"
    data = text.encode()
    path.write_bytes(data)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(source, "LINE_BLOCK_BYTES", block)
        fast = _read(path, data)
        mp.setattr(training, "read_titan_block", lambda f, lines: False)
        assert _read(path, data) == fast
    finally:
        mp.undo()


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from("[]0123456789:- \t\r\x1bTZab,.<>|x"), max_size=40),
       st.booleans())
def test_a_guarded_cleaning_equals_the_unguarded_one(line, anywhere):
    s = source.ANSI.sub("", line).replace("\r", "")
    s = source.COLLECTOR_TS.sub("", s)
    s = source.MPI_TAG.sub(" ", s) if anywhere else source.MPI_TAG_LEAD.sub("", s)
    assert source.clean_line(line, anywhere) == source.SRUN_TAG.sub("", s)
