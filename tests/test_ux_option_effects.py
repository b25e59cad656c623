"""Every option memory, estimate and checkpoint list changes their answer, or is a documented
no-op (issue #16: `memory --help` listed time and cost options that did nothing there).

Each case is two command lines that differ only in one option; both must run (exit 0 or 1) and
print different output. The runs go through `planner.cli.dispatch.run`, the function the `dtplan`
console script calls, in-process: ninety subprocesses would cost a minute of the suite."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import pytest
import typer

from conftest import ROOT, tree_built_once
from planner.cli.dispatch import register, run
from planner.cli.options import OLD_SPELLINGS
from planner.cli.root import app

B = ("--model", "llama3-8b", "--gpus", "8")
ARCH = ("--layers", "32", "--hidden", "4096", "--heads", "32", "--gpus", "8")
B70 = ("--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--zero", "1")
CFG = "hf-config.json"   # written by the fixture below: a small Llama-style config of our own
A100 = str(Path(ROOT) / "hardware_profiles" / "a100-80g.toml")


def _with(base: tuple, *extra: str) -> tuple[tuple, tuple]:
    return base, base + extra


# flag → (command line without it, command line with it), for memory and estimate alike
LAYOUT_CASES = {
    "--model": (B, ("--model", "llama2-7b", "--gpus", "8")),
    "--model-config": (B, ("--model-config", CFG, "--gpus", "8")),
    "--params": (B, ("--params", "8e9", "--gpus", "8")),
    "--nearest-preset": _with(("--params", "7e9", "--gpus", "8", "--seq-len", "4096"),
                              "--nearest-preset"),
    "--layers": (ARCH, ("--layers", "24") + ARCH[2:]),
    "--hidden": (ARCH, ARCH[:2] + ("--hidden", "2048") + ARCH[4:]),
    "--heads": (ARCH, ARCH[:4] + ("--heads", "16") + ARCH[6:]),
    "--kv-heads": _with(ARCH, "--kv-heads", "8"),
    "--ffn": _with(ARCH, "--ffn", "8192"),
    "--vocab": _with(ARCH, "--vocab", "32k"),
    "--mlp": _with(ARCH, "--mlp", "swiglu"),
    "--experts": _with(ARCH, "--experts", "8", "--experts-per-token", "2"),
    "--experts-per-token": (ARCH + ("--experts", "8", "--experts-per-token", "1"),
                            ARCH + ("--experts", "8", "--experts-per-token", "2")),
    "--expert-ffn": _with(ARCH + ("--experts", "8", "--experts-per-token", "2"),
                          "--expert-ffn", "2048"),
    "--shared-experts": _with(ARCH + ("--experts", "8", "--experts-per-token", "2"),
                              "--shared-experts", "1"),
    "--dense-layers": _with(ARCH + ("--experts", "8", "--experts-per-token", "2"),
                            "--dense-layers", "2"),
    "--moe-every": _with(ARCH + ("--experts", "8", "--experts-per-token", "2"),
                         "--moe-every", "2"),
    "--window": _with(ARCH + ("--seq-len", "8k"), "--window", "1024"),
    "--global-every": _with(ARCH + ("--seq-len", "8k", "--window", "1024"),
                            "--global-every", "2"),
    "--dropout": _with(B, "--dropout"),
    "--gpus": (B, ("--model", "llama3-8b", "--gpus", "16")),
    "--hardware": _with(B, "--hardware", "a100-80g"),
    "--hardware-file": _with(B, "--hardware-file", A100),
    "--gpus-per-node": _with(B, "--gpus-per-node", "4"),
    "--gpu-memory-gib": _with(B, "--gpu-memory-gib", "40"),
    "--nic-gbit-per-gpu": _with(B + ("--gpus-per-node", "4"), "--nic-gbit-per-gpu", "100"),
    "--seq-len": _with(B, "--seq-len", "8k"),
    "--global-batch": _with(B, "--global-batch", "64"),
    "--tokens-per-batch": _with(B, "--tokens-per-batch", "1M"),
    "--framework": _with(B, "--framework", "torchtitan"),
    "--micro-batch": _with(B, "--micro-batch", "2"),
    "--tp": _with(B, "--tp", "2"), "--pp": _with(B, "--pp", "2"), "--cp": _with(B, "--cp", "2"),
    "--ep": _with(("--model", "mixtral-8x7b", "--gpus", "8"), "--ep", "2"),
    # expert TP 1 instead of TP 2: each GPU holds whole experts, twice the expert weights
    "--etp": _with(("--model", "mixtral-8x7b", "--gpus", "8", "--tp", "2", "--ep", "2"),
                   "--etp", "1"),
    "--zero": _with(B, "--zero", "1"),
    "--shard-group": _with(B + ("--zero", "3"), "--shard-group", "4"),
    "--schedule": _with(B + ("--pp", "2"), "--schedule", "gpipe"),
    "--chunks": (B + ("--pp", "2", "--schedule", "interleaved", "--chunks", "2"),
                 B + ("--pp", "2", "--schedule", "interleaved", "--chunks", "4")),
    "--sp": _with(B + ("--tp", "2"), "--no-sp"),
    "--recompute": _with(B, "--recompute", "selective"),
    "--recompute-layers": _with(B + ("--recompute", "full"), "--recompute-layers", "4"),
    # 32 layers on PP 4: 9 on the first stage, 7 on the last (the output layer's stage)
    "--first-stage-layers": _with(B + ("--pp", "4", "--last-stage-layers", "7"),
                                  "--first-stage-layers", "9"),
    "--last-stage-layers": _with(B + ("--pp", "4", "--first-stage-layers", "9"),
                                 "--last-stage-layers", "7"),
    "--offload-optimizer": _with(B + ("--zero", "1"), "--offload-optimizer", "cpu"),
    "--offload-params": _with(B + ("--zero", "3"), "--offload-params", "cpu"),
    "--precision": _with(B, "--precision", "fp8"),
    "--optimizer": _with(B, "--optimizer", "sgd"),
    "--fp8": _with(B, "--fp8", "rowwise"),
    "--activation-offload": _with(B, "--activation-offload"),
    "--optimizer-in-backward": _with(B, "--optimizer-in-backward"),
    "--doc-tokens": _with(B, "--doc-tokens", "512"),
    "--finetune": _with(B, "--finetune", "lora"),
    "--lora-rank": _with(B + ("--finetune", "lora"), "--lora-rank", "64"),
    "--lora-alpha": _with(B + ("--finetune", "lora"), "--lora-alpha", "8"),  # printed in the recipe note
    "--lora-targets": _with(B + ("--finetune", "lora"), "--lora-targets", "q,v"),
    "--base-format": _with(B + ("--finetune", "lora"), "--base-format", "int8"),
    "--lora-dropout": _with(B + ("--finetune", "lora"), "--lora-dropout"),
    "--context-gb": _with(B, "--context-gb", "2"),
    "--comm-buffer-gb": _with(B, "--comm-buffer-gb", "2"),
    "--fragmentation": _with(B, "--fragmentation", "0.1"),
    "--margin": _with(B, "--margin", "0.1"),
    "--gib": _with(B, "--gib"),
    "--format": _with(B, "--format", "markdown"),
}
TIME_CASES = {
    "--train-tokens": _with(B, "--train-tokens", "1T"),
    "--gpu-hour-cost": _with(B + ("--train-tokens", "1T"), "--gpu-hour-cost", "2"),
    "--gpu-mtbf-hours": _with(B, "--gpu-mtbf-hours", "1000"),
    "--job-mtbf-hours": _with(B, "--job-mtbf-hours", "10"),
    "--async-checkpoint": _with(B70, "--async-checkpoint"),
}
C = ("--model", "llama3-8b", "--gpus", "64")
CHECKPOINT_CASES = {
    "--cost-min": _with(C, "--cost-min", "1"),
    "--job-mtbf-hours": _with(C, "--job-mtbf-hours", "10"),
    "--intervals": _with(C, "--intervals", "30"),
    "--restart-min": _with(C, "--restart-min", "5"),
    "--model": (C, ("--model", "llama2-7b", "--gpus", "64")),
    "--params": (C, ("--params", "7e9", "--gpus", "64")),
    "--gpus": (C, ("--model", "llama3-8b", "--gpus", "128")),
    "--hardware": _with(C, "--hardware", "a100-80g"),
    "--storage-gbs": _with(C, "--storage-gbs", "10"),
    "--read-gbs": _with(C, "--read-gbs", "10"),
    "--gpu-mtbf-hours": _with(C, "--gpu-mtbf-hours", "1000"),
    "--node-mtbf-hours": _with(C, "--node-mtbf-hours", "1000"),
    "--interruptions": (C, C + ("--interruptions", "10", "--over-days", "5")),
    "--over-days": (C + ("--interruptions", "10", "--over-days", "5"),
                    C + ("--interruptions", "10", "--over-days", "10")),
    "--async-checkpoint": _with(C, "--async-checkpoint"),
    # the time to train needs both; each changes it
    "--train-tokens": (C, C + ("--train-tokens", "1T", "--tokens-per-s", "1M")),
    "--tokens-per-s": (C + ("--train-tokens", "1T", "--tokens-per-s", "1M"),
                       C + ("--train-tokens", "1T", "--tokens-per-s", "2M")),
    "--gpu-hour-cost": _with(C + ("--train-tokens", "1T", "--tokens-per-s", "1M"),
                             "--gpu-hour-cost", "2"),
    "--straggler": _with(C, "--straggler", "1.2"),
    "--zero": _with(C, "--zero", "1"),
    "--tp": _with(C, "--tp", "2"), "--pp": _with(C, "--pp", "2"),
    "--ep": _with(("--model", "mixtral-8x7b", "--gpus", "64", "--zero", "1"), "--ep", "8"),
    "--precision": _with(C, "--precision", "fp8"),
    "--optimizer": _with(C, "--optimizer", "sgd"),
    "--format": _with(C, "--format", "json"),
}
CASES = {"memory": LAYOUT_CASES, "estimate": {**LAYOUT_CASES, **TIME_CASES},
         "checkpoint": CHECKPOINT_CASES}
# Options a command accepts that do not change its answer, and why.
NO_OPS = {
    "memory": {"--nic-gbit-per-gpu": "hidden: memory reads no network; older scripts pass it",
               "--doc-tokens": "hidden: packed documents change the attention's time alone",
               **{f: "hidden: estimate's; accepted with a note for older scripts" for f in
                  ("--train-tokens", "--gpu-hour-cost", "--gpu-mtbf-hours", "--job-mtbf-hours",
                   "--async-checkpoint")}},
}


def _flags(command: str) -> set[str]:
    """The command's options; an older spelling is its current one's (test_ux_options)."""
    register([])
    cmd = typer.main.get_group(app).commands[command]
    return {p.opts[0] for p in cmd.params if p.param_type_name == "option" and p.name != "help"
            and p.opts[0] not in OLD_SPELLINGS}


_DIR: list[Path] = []   # where the fixture wrote CFG


@functools.lru_cache(maxsize=None)
def _run(args: tuple) -> tuple[int, str]:
    argv = [str(_DIR[0] / a) if a == CFG else a for a in args]
    out = io.StringIO()
    # typer's click tree built once, as in a process (conftest.tree_built_once)
    with tree_built_once(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(io.StringIO()):
        code = run(argv)
    return code, out.getvalue()


@pytest.fixture(scope="module", autouse=True)
def _config(tmp_path_factory):
    d = tmp_path_factory.mktemp("cfg")
    (d / CFG).write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 4,
        "num_hidden_layers": 22, "vocab_size": 32000, "max_position_embeddings": 4096}))
    _DIR[:] = [d]
    yield
    _run.cache_clear()


@pytest.mark.parametrize("command", sorted(CASES))
def test_every_option_is_covered(command):
    covered = set(CASES[command]) | set(NO_OPS.get(command, {}))
    assert _flags(command) == covered


@pytest.mark.parametrize("command,flag", [(c, f) for c in sorted(CASES) for f in CASES[c]
                                          if f not in NO_OPS.get(c, {})])
def test_the_option_changes_the_answer(command, flag):
    without, with_ = CASES[command][flag]
    a, b = _run((command,) + without), _run((command,) + with_)
    assert a[0] in (0, 1) and b[0] in (0, 1), (a[0], b[0])
    assert a[1] != b[1]


@pytest.mark.parametrize("command,flag", [(c, f) for c in sorted(NO_OPS) for f in NO_OPS[c]])
def test_a_documented_no_op_is_hidden_and_changes_nothing(command, flag):
    register([])
    cmd = typer.main.get_group(app).commands[command]
    assert next(p for p in cmd.params if flag in p.opts).hidden
    value = () if flag == "--async-checkpoint" else ("100",)
    assert _run((command,) + B + (flag,) + value) == _run((command,) + B)
