"""dtplan export: engine configs consistent with the engines' rules, read back by dtplan check
to the same verdict as the plan they came from."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib

import pytest
from conftest import run_dtplan
import yaml

from planner.errors import InputError
from planner.framework_configs import export, read_engine
from planner.specs.job import CheckOptions
from planner.review.build import inputs_from_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAN = os.path.join(ROOT, "examples", "plans", "llama3-70b-256xh100.yaml")
FAIL_HEADS = os.path.join(ROOT, "examples", "plans", "fail-heads-divisible-by-tp.yaml")
CHECK = ["--gpus", "256", "--seq-len", "8192", "--hardware", "h100", "--model", "llama3-70b"]


def run(*args, cwd=None):
    return run_dtplan(*args, cwd=cwd)


def verdict(path, engine, extra=(), base=CHECK):
    p = run("check", path, "--engine", engine, *base, *extra, "-f", "json")
    data = json.loads(p.stdout)
    f = data["files"][0]
    return p.returncode, {r["name"]: r["status"] for r in f["rules"]}


@pytest.fixture(scope="module")
def inp():
    return inputs_from_plan(PLAN)


def test_deepspeed_batch_keys_consistent(inp):
    cfg = json.loads(export("deepspeed", inp).text)
    dp = 256 // (8 * 4)
    assert cfg["train_batch_size"] == 1024
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * dp)
    assert cfg["zero_optimization"]["stage"] == 1
    assert cfg["bf16"] == {"enabled": True}
    assert "activation_checkpointing" not in cfg  # selective recompute is a model flag


def test_deepspeed_refuses_zero2_with_pp(inp):
    bad = inp.__class__(**{**inp.__dict__, "layout": dataclasses.replace(inp.layout, zero=2)})
    with pytest.raises(InputError, match="incompatible with pipeline"):
        export("deepspeed", bad)


def test_deepspeed_full_recompute_and_offload(inp):
    lay = dataclasses.replace(inp.layout, pp=1, dp=32, zero=3, recompute="full",
                              offload_optimizer="cpu", offload_params="cpu")
    cfg = json.loads(export("deepspeed", inp.__class__(**{**inp.__dict__, "layout": lay})).text)
    z = cfg["zero_optimization"]
    assert z["offload_optimizer"]["device"] == "cpu" and z["offload_param"]["device"] == "cpu"
    assert "stage3_prefetch_bucket_size" in z and "activation_checkpointing" in cfg


def test_megatron_flags(inp):
    text = export("megatron", inp).text
    for flag in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
                 "--sequence-parallel", "--micro-batch-size 1", "--global-batch-size 1024",
                 "--seq-length 8192", "--num-query-groups 8", "--swiglu", "--normalization RMSNorm",
                 "--recompute-activations", "--use-distributed-optimizer", "--bf16",
                 "--nproc_per_node 8 --nnodes 32"):
        assert flag in text


def test_megatron_uneven_and_interleaved(inp):
    from planner.specs.presets import get_preset
    m = get_preset("llama3.1-405b")  # 126 layers on 16 stages: 7 on the first and last
    lay = dataclasses.replace(inp.layout, pp=16, dp=2, tp=8)
    text = export("megatron", inp.__class__(**{**inp.__dict__, "model": m, "layout": lay})).text
    assert "--decoder-first-pipeline-num-layers 7" in text
    assert "--decoder-last-pipeline-num-layers 7" in text
    lay = dataclasses.replace(inp.layout, schedule="interleaved", chunks=2)
    text = export("megatron", inp.__class__(**{**inp.__dict__, "layout": lay})).text
    assert "--num-layers-per-virtual-pipeline-stage 10" in text


def test_torchtitan_03_command_line(inp):
    """torchtitan 0.3 reads no TOML: --module/--config naming its Llama 3 70B config, every
    setting an override, AC as the subcommand token last; dtplan check reads it back."""
    text = export("torchtitan", inp).text
    assert "torchtitan 0.3.0" in text and "-m torchtitan.train" in text
    assert "--module llama3 --config llama3_70b" in text
    for flag in ("--parallelism.tensor-parallel-degree 8", "--parallelism.pipeline-parallel-degree 4",
                 "--training.global-batch-size 1024", "--training.seq-len 8192",
                 "--training.disable-cuda-graphs", "--compile.enable"):
        assert flag in text, flag
    assert text.rstrip().endswith("activation-checkpoint:selective")
    back = read_engine("torchtitan", "run.sh", text, None, CheckOptions(gpus=256, hardware="h100"))
    assert (back.layout.tp, back.layout.pp, back.layout.dp, back.global_batch) == (8, 4, 8, 1024)
    assert back.model.layers == 80 and not [r for r in back.rules if r.status == "fail"]
    # torchtitan 0.3 refuses PP under CUDA graphs (trainer.py _validate_cuda_graphs)
    graphs = read_engine("torchtitan", "run.sh", text.replace("--training.disable-cuda-graphs",
                                                              ""),
                         None, CheckOptions(gpus=256, hardware="h100"))
    assert [r.name for r in graphs.rules if r.status == "fail"] == ["torchtitan-cuda-graphs"]


def test_torchtitan_model_without_a_config_gets_placeholders_it_refuses(inp):
    """Never torchtitan's debug model: a model it has no config for is named by placeholders."""
    other = dataclasses.replace(inp, model=dataclasses.replace(inp.model, name="Qwen2-72B"))
    assert "--module MODULE --config CONFIG" in export("torchtitan", other).text
    toml = tomllib.loads(export("torchtitan", other, "0.2").text)
    assert toml["model"] == {"name": "MODEL", "flavor": "FLAVOR"}


def test_accelerate_multi_node_fields(inp):
    """Several nodes: Accelerate's head address and port, each node's rank (a placeholder and
    a note), num_processes an exact multiple of the nodes (it starts processes // machines)."""
    lay = dataclasses.replace(inp.layout, pp=1, tp=1, dp=256, zero=3, recompute="full")
    out = export("accelerate", dataclasses.replace(inp, layout=lay))
    cfg = yaml.safe_load(out.text)
    assert (cfg["num_machines"], cfg["machine_rank"], cfg["main_process_ip"],
            cfg["main_process_port"]) == (32, 0, "HEAD_NODE_IP", 29500)
    assert any("machine_rank" in n for n in out.notes)
    one = dataclasses.replace(inp, gpus=8, layout=dataclasses.replace(lay, dp=8))
    assert "main_process_ip" not in yaml.safe_load(export("accelerate", one).text)
    odd = dataclasses.replace(inp, gpus=9, global_batch=900,
                              layout=dataclasses.replace(lay, dp=9))
    with pytest.raises(InputError, match="same number of processes"):
        export("accelerate", odd)


def test_torchtitan_keys(inp):
    cfg = tomllib.loads(export("torchtitan", inp, "0.2").text)
    p, t = cfg["parallelism"], cfg["training"]
    assert p["tensor_parallel_degree"] == 8 and p["pipeline_parallel_degree"] == 4
    assert p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"] == 8
    assert p["pipeline_parallel_schedule"] == "1F1B"
    assert t["global_batch_size"] == 1024 and t["seq_len"] == 8192
    assert t["local_batch_size"] % p["pipeline_parallel_microbatch_size"] == 0
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    assert cfg["model"] == {"name": "llama3", "flavor": "70B"}


def test_accelerate_refuses_pp_and_exports_fsdp(inp):
    with pytest.raises(InputError, match="pipeline parallel"):
        export("accelerate", inp)
    lay = dataclasses.replace(inp.layout, pp=1, dp=32, zero=3, recompute="full")
    cfg = yaml.safe_load(export("accelerate", inp.__class__(**{**inp.__dict__, "layout": lay})).text)
    assert cfg["distributed_type"] == "FSDP" and cfg["num_processes"] == 256
    assert cfg["num_machines"] == 32 and cfg["mixed_precision"] == "bf16"
    f = cfg["fsdp_config"]
    assert f["fsdp_version"] == 2 and f["fsdp_reshard_after_forward"] is True
    assert f["fsdp_activation_checkpointing"] is True
    assert cfg["parallelism_config"]["parallelism_config_tp_size"] == 8
    assert cfg["parallelism_config"]["parallelism_config_dp_shard_size"] == 32


@pytest.mark.parametrize("engine", ["deepspeed", "megatron", "torchtitan"])
def test_round_trip_pass(engine, tmp_path):
    out = tmp_path / f"cfg.{engine}"
    plan = PLAN
    if engine == "deepspeed":
        # DeepSpeed's profile has no selective recompute: the plan's layout fails under it, so
        # the export refuses it (it used to write it with recompute dropped, and check agreed);
        # the same plan with full recompute round-trips.
        refused = run("export", PLAN, "--to", engine, "-o", out)
        assert refused.returncode == 1 and "recompute-in-framework" in refused.stderr
        plan = tmp_path / "plan.yaml"
        plan.write_text(open(PLAN).read().replace("recompute: selective", "recompute: full"))
    p = run("export", plan, "--to", engine, "-o", out)
    assert p.returncode == 0, p.stderr
    code, rules = verdict(out, engine, ("--tp", "8", "--pp", "4") if engine == "deepspeed" else ())
    assert run("check", plan).returncode == 0
    assert code == 0, rules
    assert all(s != "fail" for s in rules.values())


def test_round_trip_fail_same_rule(tmp_path):
    assert run("check", FAIL_HEADS).returncode == 1
    p = run("export", FAIL_HEADS, "--to", "megatron")
    assert p.returncode == 1 and "heads-divisible-by-tp" in p.stderr
    out = tmp_path / "bad.sh"
    p = run("export", FAIL_HEADS, "--to", "megatron", "--allow-failing", "-o", out)
    assert p.returncode == 0, p.stderr
    code, rules = verdict(out, "megatron", base=["--hardware", "h100"])  # shape from the flags
    assert code == 1 and rules["heads-divisible-by-tp"] == "fail"


def test_export_stdout_force_and_errors(tmp_path):
    p = run("export", PLAN, "--to", "torchtitan", "-o", "-")
    assert p.returncode == 0 and "--parallelism.tensor-parallel-degree 8" in p.stdout
    p = run("export", PLAN, "--to", "torchtitan", "--torchtitan-version", "0.2", "-o", "-")
    assert p.returncode == 0 and "[parallelism]" in p.stdout
    p = run("export", PLAN, "--to", "torchtitan", "-o", tmp_path / "job.toml")
    assert p.returncode == 2 and "--torchtitan-version 0.2" in p.stderr
    p = run("export", PLAN, "--to", "torchtitan", "--torchtitan-version", "0.4")
    assert p.returncode == 2 and "0.3, 0.2" in p.stderr
    out = tmp_path / "run.sh"   # (DeepSpeed refuses this plan's selective recompute)
    assert run("export", PLAN, "--to", "megatron", "-o", out).returncode == 0
    p = run("export", PLAN, "--to", "megatron", "-o", out)
    assert p.returncode == 2 and "--force" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert run("export", PLAN, "--to", "megatron", "-o", out, "--force").returncode == 0
    p = run("export", PLAN, "--to", "accelerate")
    assert p.returncode == 2 and "pipeline parallel" in p.stderr
    assert run("export", PLAN, "--to", "nemo").returncode == 2


def test_export_from_fit_options():
    p = run("export", "--to", "accelerate", "--model", "llama3-8b", "--gpus", "8",
            "--seq-len", "2048", "--global-batch", "64")
    # the winner may use PP, which Accelerate cannot express: either a YAML or a one-line refusal
    assert p.returncode in (0, 2)
    if p.returncode == 0:
        assert yaml.safe_load(p.stdout)["num_processes"] == 8
    else:
        assert "cannot express" in p.stderr
    p = run("export", "--to", "deepspeed", "--model", "llama3-8b", "--gpus", "8",
            "--seq-len", "2048", "--global-batch", "64")
    assert p.returncode in (0, 2)


def test_uneven_pipeline_round_trip_through_megatron(tmp_path):
    # Llama 3's 126 layers on 16 stages: first and last stage one layer fewer.
    plan = tmp_path / "p405.yaml"
    plan.write_text("model: llama3.1-405b\ngpus: 16384\nseq_len: 8192\n"
                    "layout: {tp: 8, pp: 16, zero: 1, recompute: full, recompute_layers: 4}\n"
                    "batch: {global_batch: 2048, micro_batch: 1}\n")
    out = tmp_path / "p405.sh"
    assert run("export", plan, "--to", "megatron", "-o", out).returncode == 0
    text = out.read_text()
    assert "--decoder-first-pipeline-num-layers 7" in text
    assert "--decoder-last-pipeline-num-layers 7" in text
    r = run("check", out, "--model", "llama3.1-405b", "-f", "json")
    assert r.returncode == 0, r.stdout[-2000:]
    rules = {x["name"]: x["status"] for x in json.loads(r.stdout)["files"][0]["rules"]}
    assert rules["megatron-layers-divisible"] == "pass"


def test_a_plan_model_without_a_name_is_a_placeholder_in_the_check_line(dtplan, tmp_path):
    """An inline model shape has no name: the line says MODEL (to fill in), not `--model None`."""
    (tmp_path / "p.yaml").write_text(
        "model: {layers: 32, hidden: 4096, heads: 32, ffn: 14336, vocab: 128256}\n"
        "hardware: {profile: h100}\ngpus: 8\nseq_len: 4096\nbatch: {global_batch: 64}\n"
        "layout: {tp: 1, pp: 1, micro_batch: 1, zero: 1}\n")
    r = dtplan("export", "p.yaml", "--to", "deepspeed", "-o", "ds.json", "--allow-failing",
               cwd=tmp_path)
    line = next(x for x in r.err.splitlines() if "check it with: " in x)
    assert line.endswith("--hardware h100 --model MODEL"), line


def test_check_dir_finds_a_torchtitan_command_line(inp, tmp_path):
    """`dtplan check DIR` picks up torchtitan 0.3 launches among the shell scripts."""
    from planner.io.tree import expand
    (tmp_path / "run.sh").write_text(export("torchtitan", inp).text)
    (tmp_path / "notes.sh").write_text("echo hello\n")
    found, skipped = expand([str(tmp_path)])
    assert [os.path.basename(f) for f in found] == ["run.sh"]
    assert [os.path.basename(f) for f in skipped] == ["notes.sh"]
