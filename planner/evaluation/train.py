"""One layout's job figures beyond its estimate: a Layout from knobs by name, the question
(Problem) for a model on a cluster, the time and cost to train a token budget, and the
checkpoint and failure plan (planner.resilience) at a failure rate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from planner.errors import InputError, named
from planner.evaluation.candidates import Problem
from planner.evaluation.estimate import Estimate
from planner.io import validate as v
from planner.resilience.planning import ResiliencePlan, plan_resilience
from planner.specs.budget import MemoryBudget
from planner.engine.finetune import lora_params
from planner.specs.finetune import FULL, Tuning, adapter_pairs
from planner.specs.hardware import HardwareProfile
from planner.specs.knobs import KNOB, Layout
from planner.specs.model import ModelSpec


def build_layout(*, gpus: int, **knobs: Any) -> Layout:
    """A Layout from knobs by name (specs.layout.KNOBS), DP = GPUs/(TP·PP·CP); an error names
    the knob (the CLI: its option)."""
    unknown = sorted(set(knobs) - set(KNOB) | ({"dp"} & set(knobs)))
    if unknown:
        raise TypeError(f"build_layout: not a layout knob here: {', '.join(unknown)}")
    k = {n: knobs.get(n, KNOB[n].default) for n in KNOB if n != "dp"}
    tp, pp, cp, gpus = k["tp"], k["pp"], k["cp"], v.positive_int("gpus", gpus)
    for name in ("tp", "pp", "cp", "ep"):
        v.positive_int(name, k[name])
    v.zero_stage("zero", k["zero"])
    if gpus % (tp * pp * cp):
        raise InputError(named("gpus"), f"{gpus} GPUs do not divide by TP×PP×CP = {tp * pp * cp}")
    for name in ("schedule", "recompute", "offload_optimizer", "offload_params"):
        v.choice(name, k[name], KNOB[name].choices)
    if k["shard_group"] is not None:
        v.positive_int("shard_group", k["shard_group"])
    if k["recompute_layers"] is not None and k["recompute"] != "full":
        raise InputError(named("recompute_layers"), f"needs {named('recompute')} full")
    k.update(micro_batch=k["micro_batch"] or 1, chunks=k["chunks"] or 1)
    return Layout(dp=gpus // (tp * pp * cp), **k)


def problem(model: ModelSpec, hardware: HardwareProfile, gpus: int, *, seq_len: int,
            global_batch: int, precision: str = "mixed", optimizer: str = "adam",
            budget: MemoryBudget | None = None, tuning: Tuning = FULL) -> Problem:
    return Problem(model=model, hardware=hardware, gpus=v.positive_int("gpus", gpus),
                   seq_len=seq_len, global_batch=global_batch, precision=precision,
                   optimizer=optimizer, budget=budget or MemoryBudget(), tuning=tuning)


@dataclass(frozen=True, kw_only=True)
class TimeToTrain:
    train_tokens: float
    seconds: float
    days: float
    gpu_hours: float
    cost: Optional[float] = None
    energy_mwh: float
    summary: str


def time_to_train(e: Estimate, train_tokens: float, gpu_hour_cost: Optional[float] = None,
                  goodput: float = 1.0) -> TimeToTrain:
    """Wall-clock time to train a token budget (tokens ÷ tokens/s ÷ goodput, engine.resilience),
    with GPU-hours, cost and energy at board power."""
    from planner.engine import resilience as res_eq
    tokens = v.positive("train_tokens", train_tokens)
    secs = float(res_eq.train_time(tokens, e.tokens_per_s, goodput))
    gpu_h = float(res_eq.gpu_hours(secs, e.gpus))
    cost = gpu_h * gpu_hour_cost if gpu_hour_cost is not None else None
    energy = e.energy_per_step_j / e.step_time_s * secs / 3.6e9
    text = (f"Training {tokens:.3g} tokens takes {secs / 86400:.1f} days on {e.gpus} GPUs "
            f"({gpu_h:,.0f} GPU-hours" + (f", cost {cost:,.0f}" if cost is not None else "")
            + f", {energy:,.1f} MWh at board power)" + ("" if goodput == 1.0 else
                                                      f" at {goodput:.1%} goodput"))
    return TimeToTrain(train_tokens=tokens, seconds=secs, days=secs / 86400, gpu_hours=gpu_h,
                       cost=cost, energy_mwh=energy, summary=text)


# ---------------------------------------------------------------------------------------------
# checkpoint and failure planning for a chosen layout

# Llama 3 saw 419 unexpected interruptions in 54 days on 16,384 GPUs (CALIBRATION.md §6): a
# per-GPU MTBF of 54 d × 24 h × 16,384 / 419 ≈ 50,700 h, the default failure rate here.
DEFAULT_GPU_MTBF_S = 54 * 86400 * 16384 / 419


def checkpointed_params(model: ModelSpec, lay: Layout) -> tuple[float, float]:
    """(parameters, routed-expert parameters) whose weights and optimizer state a checkpoint
    holds: all of them, or under a frozen base the adapters alone (PEFT's save_pretrained and
    torchtune's adapter checkpoints write the adapters; the base is the checkpoint the run
    started from)."""
    tuning = Tuning.of(lay)
    if not tuning.frozen:
        return float(model.param_count()), float(model.routed_expert_params())
    return model.layers * float(lora_params(adapter_pairs(model, tuning), tuning.rank)), 0.0


def resilience_plan(model: ModelSpec, hardware: HardwareProfile, gpus: int, lay: Layout, *,
                gpu_mtbf_s: Optional[float] = DEFAULT_GPU_MTBF_S,
                job_mtbf_s: Optional[float] = None, train_tokens: Optional[float] = None,
                tokens_per_s: Optional[float] = None, gpu_hour_cost: Optional[float] = None,
                async_checkpoint: bool = False) -> ResiliencePlan:
    params, experts = checkpointed_params(model, lay)
    return plan_resilience(params, gpus, hardware=hardware, model=model.name,
                           tp=lay.tp, pp=lay.pp, zero_stage=lay.zero, precision=lay.precision,
                           shard_degree=lay.shard_group, ep=lay.ep,
                           expert_params=experts,
                           optimizer=lay.optimizer,
                           gpu_mtbf_s=None if job_mtbf_s is not None else gpu_mtbf_s,
                           job_mtbf_s=job_mtbf_s, async_checkpoint=async_checkpoint,
                           tokens=train_tokens,
                           tokens_per_s=tokens_per_s if train_tokens else None,
                           price_per_gpu_hour=gpu_hour_cost)


def resilience_for(e: Estimate, hardware: HardwareProfile, model: ModelSpec, *,
                   gpu_mtbf_s: float = DEFAULT_GPU_MTBF_S, job_mtbf_s: Optional[float] = None,
                   train_tokens: Optional[float] = None, gpu_hour_cost: Optional[float] = None,
                   async_checkpoint: bool = False) -> ResiliencePlan:
    """Checkpoint size and write time for this layout, the Young/Daly interval, goodput and,
    given a token budget, the time to train including failures. A job MTBF, when given,
    replaces the per-GPU one."""
    return resilience_plan(model, hardware, e.gpus, e.layout, gpu_mtbf_s=gpu_mtbf_s,
                       job_mtbf_s=job_mtbf_s,
                       train_tokens=train_tokens, tokens_per_s=e.tokens_per_s,
                       gpu_hour_cost=gpu_hour_cost, async_checkpoint=async_checkpoint)

