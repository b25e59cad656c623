"""A Megatron-LM script's MoE token path, read as Megatron runs it (megatron-core 0.15.3):
the dispatcher (--moe-token-dispatcher-type: allgather when unstated, Megatron-Core's default;
alltoall; flex with DeepEP) and the expert capacity (--moe-expert-capacity-factor, padded with
--moe-pad-expert-input-to-capacity, a cap on the busiest expert without it); the allgather
dispatcher priced as an all-gather and a reduce-scatter of the EP group's tokens; exports that
write what a profile states."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_dtplan
from planner.engine import step_time as st
from planner.engine.topology import fabric
from planner.specs.hardware_toml import load_profile
from planner.framework_configs.megatron_args import parse_megatron_args
from planner.framework_configs.megatron_moe import job_framework
from planner.errors import InputError

MIXTRAL = ("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --tensor-model-parallel-size 1 "
           "--expert-model-parallel-size 8 --num-layers 32 --hidden-size 4096 "
           "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
           "--num-query-groups 8 --num-experts 8 --moe-router-topk 2 --swiglu "
           "--position-embedding-type rope --normalization RMSNorm --disable-bias-linear "
           "--untie-embeddings-and-output-weights --seq-length 4096 --micro-batch-size 1 "
           "--global-batch-size 64 --bf16 --vocab-size 32000 --use-distributed-optimizer "
           "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")


def _fw(extra: str = ""):
    notes: list[str] = []
    return job_framework(parse_megatron_args(MIXTRAL + " " + extra, "moe.sh"), "moe.sh", notes), notes


def test_the_dispatcher_is_read_as_megatron_defaults_it():
    assert _fw()[0].time.ep_dispatcher == "allgather"        # unstated: Megatron-Core's default
    assert _fw("--moe-token-dispatcher-type alltoall")[0].time.ep_dispatcher == "alltoall"
    assert _fw("--moe-token-dispatcher-type flex --moe-enable-deepep")[0].time.ep_dispatcher \
        == "deepep"
    with pytest.raises(InputError, match="--moe-token-dispatcher-type"):
        _fw("--moe-token-dispatcher-type ring")


def test_the_capacity_is_read_padded_or_as_a_cap():
    padded, notes = _fw("--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity")
    assert padded.time.moe_capacity_factor == 1.25 and not notes
    capped, notes = _fw("--moe-expert-capacity-factor 1.25")
    assert capped.time.moe_capacity_factor == 0.0 and capped.time.ep_load_imbalance == 1.0
    assert notes and "caps the busiest expert" in notes[0]
    # negative: None, nothing dropped (transformer_config.py:855-857)
    assert _fw("--moe-expert-capacity-factor -1")[0].time.moe_capacity_factor == 0.0
    for bad in ("0", "x"):
        with pytest.raises(InputError, match="--moe-expert-capacity-factor"):
            _fw(f"--moe-expert-capacity-factor {bad}")


def test_allgather_moves_every_token_to_every_rank():
    fab = fabric(load_profile("h100"), 16)
    tokens, h, k = 4096.0, 4096.0, 2.0
    gather = st.ep_time_per_layer(tokens, h, k, 8, 1, 8, fab, route=st.EpRoute(gather=True))
    a2a = st.ep_time_per_layer(tokens, h, k, 8, 1, 8, fab, route=st.EpRoute())
    assert float(np.asarray(gather)) > float(np.asarray(a2a)) > 0.0
    # the group is expert TP × EP (Megatron's tp_ep_group): ETP 2 gathers twice the tokens
    etp2 = st.ep_time_per_layer(tokens, h, k, 8, 2, 8, fab, route=st.EpRoute(gather=True))
    assert float(np.asarray(etp2)) > float(np.asarray(gather))
    assert float(np.asarray(st.ep_time_per_layer(tokens, h, k, 1, 1, 8, fab,
                                                 route=st.EpRoute(gather=True)))) == 0.0


def test_check_prices_the_dispatcher_the_script_runs(tmp_path):
    times = {}
    for name, extra in (("allgather", ""), ("alltoall", " --moe-token-dispatcher-type alltoall"),
                        ("deepep", " --moe-token-dispatcher-type flex --moe-enable-deepep")):
        script = tmp_path / f"{name}.sh"
        script.write_text(MIXTRAL + extra + "\n")
        r = run_dtplan("check", str(script), "--hardware", "h100", "-f", "json")
        assert r.code in (0, 1), r.err
        f = json.loads(r.out)["files"][0]
        times[name] = f["summary"]["step_time_s"]
        if name == "allgather":
            assert any("all-gather of every rank's tokens" in n for n in f["notes"])
    # k = 2 of EP 8: the all-gather moves 8 copies of a token where the all-to-all moves 2
    assert times["allgather"] > times["alltoall"] >= times["deepep"]


def test_an_export_writes_what_the_profile_states(tmp_path):
    base = (Path(ROOT) / "framework_profiles" / "megatron.toml").read_text()
    prof = tmp_path / "mine.toml"
    prof.write_text(base.replace('ep_dispatcher = "deepep"', 'ep_dispatcher = "alltoall"')
                    .replace("moe_capacity_factor = { value = 0.0,",
                             "moe_capacity_factor = { value = 1.25,")
                    .replace('name = "megatron"', 'name = "megatron-capped"'))
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: mixtral-8x7b\nhardware: h100\ngpus: 16\nseq_len: 4096\n"
                    f"framework: {prof}\nlayout:\n  ep: 8\n  zero: 1\n  micro_batch: 1\n"
                    "  recompute: full\nbatch:\n  global_batch: 64\n")
    out = run_dtplan("export", str(plan), "--to", "megatron", "--allow-failing")
    assert out.code == 0, out.err
    assert "--moe-token-dispatcher-type alltoall" in out.out
    assert "--moe-expert-capacity-factor 1.25" in out.out
    assert "--moe-pad-expert-input-to-capacity" in out.out
    # and read back, the same token path
    script = tmp_path / "back.sh"
    script.write_text(out.out)
    fw = job_framework(parse_megatron_args(out.out, "back.sh"), "back.sh", [])
    assert (fw.time.ep_dispatcher, fw.time.moe_capacity_factor) == ("alltoall", 1.25)
