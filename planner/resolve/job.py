"""The one resolver: what a user said — command-line flags, a plan file's sections, an engine
config — to one ``specs.job.Job`` (model, hardware, GPUs, layout, batch). Every command goes
through it, so a missing or invalid input is reported the same way whichever input it came
from, and all of them in one message (``errors.Problems``: one line per field, exit 2).

- flags: ``Flags`` (the model, hardware, batch and framework options every job command shares;
  ``resolve_model`` / ``resolve_hardware`` / ``resolve_batch`` below);
- plan sections: ``resolve_plan`` (``inputs.sections``);
- engine configs and plan files by path: ``resolve_file`` (detection, then the engine's reader in
  ``planner.framework_configs``, with the check command's overrides applied to the file's own keys).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, cast

from planner.io import validate as v
from planner.io.numbers import parse_number
from planner.errors import InputError, Problems, validation_message

if TYPE_CHECKING:  # the models are imported where a part is resolved: `--help` loads none of them
    from planner.specs.framework import FrameworkProfile
    from planner.specs.hardware import HardwareProfile
    from planner.specs.job import CheckOptions, Job
    from planner.specs.model import ModelSpec
    from planner.specs.verdict import FileKind



def __getattr__(name: str) -> Any:
    """``resolve_plan`` (plan sections → Job, ``inputs.sections``) re-exported on first use: the
    plan schema it needs is not imported by commands that read no plan."""
    if name == "resolve_plan":
        from planner.resolve.sections import resolve_plan
        return resolve_plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# When the user gives no batch: 4M tokens per step (the Llama/GPT-3 class), sequence 4096.
DEFAULT_SEQ_LEN = 4096
DEFAULT_TOKENS_PER_BATCH = 4 * 2**20


# Shape flags beyond --layers/--hidden/--heads: MoE (routed and shared experts, their width,
# leading dense layers, MoE every k-th layer) and a sliding attention window. Each is the
# ModelSpec field of that name; CLI option `--experts-per-token` etc. (cli/options.py).
ARCH_EXTRA = ("experts", "experts_per_token", "expert_ffn", "shared_experts", "dense_layers",
              "moe_every", "window", "global_every")


def resolve_model(*, model: Optional[str] = None, model_config: Optional[str] = None,
                  params: Optional[float] = None, layers: Optional[int] = None,
                  hidden: Optional[int] = None, heads: Optional[int] = None,
                  kv_heads: Optional[int] = None, ffn: Optional[int] = None,
                  vocab: Optional[int] = None, mlp: Optional[str] = None,
                  dropout: Optional[bool] = None,
                  extra: Optional[dict[str, Optional[int]]] = None) -> ModelSpec:
    """Exactly one source: --model, --model-config, --params, or the architecture flags;
    --dropout / --no-dropout then overrides whether the model trains with dropout (masks are
    stored for backward), whatever the source said (a GeLU model with or without dropout)."""
    spec = _resolve_source(model=model, model_config=model_config, params=params, layers=layers,
                           hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab,
                           mlp=mlp, extra=extra or {})
    return spec if dropout is None else dataclasses.replace(spec, dropout=bool(dropout))


def _resolve_source(*, model: Optional[str], model_config: Optional[str],
                    params: Optional[float], layers: Optional[int], hidden: Optional[int],
                    heads: Optional[int], kv_heads: Optional[int], ffn: Optional[int],
                    vocab: Optional[int], mlp: Optional[str],
                    extra: dict[str, Optional[int]]) -> ModelSpec:
    arch = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
            "ffn": ffn, "vocab": vocab, "mlp": mlp, **extra}
    given_arch: dict[str, Any] = {k: x for k, x in arch.items() if x is not None}
    sources = [s for s, x in (("--model", model), ("--model-config", model_config),
                              ("--params", params)) if x is not None]
    if given_arch and not {"layers", "hidden", "heads"} <= set(given_arch):
        if sources:   # --vocab with --params: the flag given is what is wrong
            flag = "--" + next(iter(given_arch)).replace("_", "-")
            raise InputError(flag, f"is an architecture flag and {sources[0]} already names the "
                             f"model; give --layers, --hidden and --heads instead of {sources[0]}")
        missing = sorted({"layers", "hidden", "heads"} - set(given_arch))
        raise InputError("--" + missing[0], "architecture flags need at least --layers, --hidden "
                         "and --heads")
    if given_arch:
        sources.append("--layers/--hidden/--heads")
    if len(sources) != 1:
        raise InputError("--model", "give exactly one of --model PRESET, --model-config PATH, "
                         "--params N or the architecture flags (--layers --hidden --heads ...)"
                         + (f"; got {', '.join(sources)}" if sources else ""))
    if model is not None:
        from planner.specs.presets import get_preset
        return get_preset(model)
    if model_config is not None:
        from planner.specs.hf_config import load_hf_config
        return load_hf_config(model_config, option="--model-config")
    if params is not None:
        from planner.specs.model import model_from_params
        return model_from_params(v.positive("--params", params, upper=v.MAX_PARAMS))
    return _from_flags(**given_arch)


def _from_flags(layers: int, hidden: int, heads: int, kv_heads: Optional[int] = None,
                ffn: Optional[int] = None, vocab: Optional[int] = None,
                mlp: Optional[str] = None, **extra: Optional[int]) -> ModelSpec:
    """A model described as papers do. GeLU (the default) means the GPT/Megatron layer: 4h FFN,
    learned positions, biases, LayerNorm, dropout, tied embeddings; SwiGLU means Llama-style.
    ``extra``: the ARCH_EXTRA shape flags given (MoE, sliding window)."""
    for f, x in (("--layers", layers), ("--hidden", hidden), ("--heads", heads)):
        v.positive_int(f, x)
    mlp = v.choice("--mlp", mlp or "gelu", ("gelu", "swiglu"))
    gpt = mlp == "gelu"
    spec = dict(name=f"custom-{layers}L-{hidden}h", layers=layers, hidden=hidden, heads=heads,
                kv_heads=kv_heads or heads,
                ffn=ffn or (4 * hidden if gpt else int(8 * hidden / 3 / 256 + 0.999) * 256),
                vocab=vocab or (51200 if gpt else 128256), mlp=mlp,
                tied_embeddings=gpt, position="learned" if gpt else "rope",
                max_positions=2048 if gpt else None, qkv_bias=gpt, linear_bias=gpt,
                norm="layernorm" if gpt else "rmsnorm", dropout=gpt,
                source="architecture flags (" + ("GPT-style: GeLU 4h MLP, learned positions, "
                                                 "biases, dropout, tied embeddings" if gpt else
                                                 "Llama-style: SwiGLU, RMSNorm, rope, untied") + ")")
    spec.update(extra)
    from planner.specs.model import validate_model
    try:
        made = validate_model(spec)
    except ValueError as e:  # pydantic validation: heads vs kv heads, hidden vs heads, MoE
        message = validation_message(e)
        flag = next((f for f in ("window", "global_every", "dense_layers", "moe_every",
                                 "shared_experts", "expert_ffn", "experts_per_token", "experts")
                     if f in message), "heads")
        raise InputError("--" + flag.replace("_", "-"), message) from None
    if made.param_count() > v.MAX_PARAMS:   # the largest flag given is the one to change
        sizes = {f: x for f, x in (("--layers", layers), ("--hidden", hidden), ("--ffn", ffn),
                                    ("--vocab", vocab)) if x}
        flag = max(sizes, key=sizes.__getitem__)
        raise InputError(flag, f"{sizes[flag]} makes {made.param_count():.3g} parameters (with "
                         f"--layers {layers} --hidden {hidden}); at most {v.MAX_PARAMS:g}")
    return made


def resolve_hardware(*, hardware: Optional[str] = None, hardware_file: Optional[str] = None,
                     gpus_per_node: Optional[int] = None, gpu_memory_gb: Optional[float] = None,
                     nic_gbit_per_gpu: Optional[float] = None) -> HardwareProfile:
    """A profile by name (default h100) or file, with what-if overrides."""
    from planner.specs.hardware import DEFAULT_PROFILE
    from planner.specs.hardware_toml import load_profile, load_profile_file, with_overrides
    if hardware and hardware_file:
        raise InputError("--hardware", "give --hardware NAME or --hardware-file PATH, not both")
    prof = load_profile_file(hardware_file, option="--hardware-file") if hardware_file is not None else load_profile(hardware or DEFAULT_PROFILE)
    if gpus_per_node is not None or gpu_memory_gb is not None or nic_gbit_per_gpu is not None:
        prof = with_overrides(prof, gpus_per_node=gpus_per_node, gpu_memory_gb=gpu_memory_gb,
                              nic_gbit_per_gpu=nic_gbit_per_gpu)
    return prof


def sequences_for_tokens(tokens: float, seq_len: int, tolerance: float = 0.05) -> int:
    """Global batch in sequences for a token budget: tokens/seq rounded to a multiple of the
    largest power of two that stays within `tolerance`, so data-parallel degrees divide it
    (Llama 3's "16M tokens" at 8K is 2048 sequences, 16.8M tokens)."""
    exact = tokens / seq_len
    g = 1 << max(0, int(exact).bit_length())
    while g > 1:
        n = max(1, round(exact / g)) * g
        if abs(n - exact) <= tolerance * exact:
            return n
        g //= 2
    return max(1, round(exact))


def resolve_batch(*, seq_len: Optional[int], global_batch: Optional[int],
                  tokens_per_batch: Optional[float], gpus: Optional[int] = None) -> tuple[int, int, str]:
    """(sequence length, global batch in sequences, a note on any rounding). With `gpus`, a
    token budget (the default one too) rounds to the nearby batch that the most data-parallel
    degrees of that GPU count divide (engine.batch.dp_friendly_batch)."""
    s = v.positive_int("--seq-len", seq_len if seq_len is not None else DEFAULT_SEQ_LEN,
                       upper=v.MAX_SEQ_LEN)
    if global_batch is not None and tokens_per_batch is not None:
        raise InputError("--global-batch", "give --global-batch or --tokens-per-batch, not both")
    if global_batch is not None:
        return s, v.positive_int("--global-batch", global_batch, upper=v.MAX_GLOBAL_BATCH), ""
    tokens = v.positive("--tokens-per-batch", tokens_per_batch if tokens_per_batch is not None
                        else DEFAULT_TOKENS_PER_BATCH, upper=v.MAX_TOKENS_PER_BATCH)
    if tokens / s > v.MAX_GLOBAL_BATCH:   # the bound of --global-batch: a batch, however given
        raise InputError("--tokens-per-batch", f"{tokens:g} tokens of --seq-len {s} are "
                         f"{tokens / s:,.0f} sequences; at most {v.MAX_GLOBAL_BATCH:,} per step")
    n = sequences_for_tokens(tokens, s)
    if n > v.MAX_GLOBAL_BATCH:   # rounded up past the bound: the exact count instead
        n = max(1, round(tokens / s))
    why = "a multiple of a power of two, so that data-parallel degrees divide it"
    if gpus is not None:
        from planner.engine.batch import dp_friendly_batch
        m = dp_friendly_batch(tokens / s, gpus)
        if m != n and m <= v.MAX_GLOBAL_BATCH:
            n, why = m, f"the nearest that the most data-parallel degrees of {gpus} GPUs divide"
    note = (f"{tokens:,.0f} tokens per batch → {n} sequences of {s} ({n * s:,} tokens, "
            f"{(n * s - tokens) / tokens:+.1%}), rounded to {why}" if n * s != tokens else "")
    if tokens_per_batch is None:
        note = (f"No batch given: the default {n * s:,} tokens per step ({n} sequences of {s}"
                + (f"; {why}" if n * s != tokens else "") + ")")
    return s, n, note


# ---- flags ------------------------------------------------------------------------------------

_MODEL_FLAGS = ("model", "model_config", "params", "layers", "hidden", "heads", "kv_heads", "ffn",
                "vocab", "mlp", *ARCH_EXTRA)


@dataclass(frozen=True, kw_only=True)
class Flags:
    """What the user typed about the model, the hardware, the batch and the framework (the
    options every job command shares, ``cli.common.JOB_OPTIONS``). The first question asked of
    it resolves every part at once, so all bad or missing options come in one message."""

    model: Optional[str] = None
    model_config: Optional[str] = None
    params: Optional[str] = None
    layers: Optional[int] = None
    hidden: Optional[int] = None
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    ffn: Optional[int] = None
    vocab: Optional[int] = None
    mlp: Optional[str] = None
    experts: Optional[int] = None
    experts_per_token: Optional[int] = None
    expert_ffn: Optional[int] = None
    shared_experts: Optional[int] = None
    dense_layers: Optional[int] = None
    moe_every: Optional[int] = None
    window: Optional[int] = None
    global_every: Optional[int] = None
    dropout: Optional[bool] = None
    hardware: Optional[str] = None
    hardware_file: Optional[str] = None
    gpus_per_node: Optional[int] = None
    gpu_memory_gb: Optional[float] = None
    nic_gbit: Optional[float] = None
    seq_len: Optional[int] = None
    global_batch: Optional[int] = None
    tokens_per_batch: Optional[str] = None
    framework: Optional[str] = None
    nearest_preset: bool = False   # --params N --nearest-preset: plan the real model nearest N
    # each resolved part, once (not an option: not given, shown or compared)
    _parts: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _resolve(self, want_model: bool) -> None:
        """Model (when wanted or any model option was given), hardware and batch, each once;
        every InputError of the parts resolved here is raised together."""
        found = Problems()
        todo = {"hardware": self._hardware, "batch": lambda: self._batch(None),
                "framework": self._framework}
        if want_model or any(getattr(self, n) is not None for n in _MODEL_FLAGS):
            todo = {"model": self._model, **todo}
        for part, make in todo.items():
            if part not in self._parts:
                value = found.run(make)
                if value is not None:
                    self._parts[part] = value
        found.check()

    def _model(self) -> ModelSpec:
        from planner.io.numbers import parse_number
        offer = self.offer() if self.nearest_preset else None   # a dict: --params is given
        if offer is not None:
            return resolve_model(model=offer["preset"], model_config=self.model_config,
                                 layers=self.layers, hidden=self.hidden, heads=self.heads,
                                 kv_heads=self.kv_heads, ffn=self.ffn, vocab=self.vocab,
                                 mlp=self.mlp, dropout=self.dropout, extra=self._extra())
        params = parse_number("--params", self.params) if self.params is not None else None
        return resolve_model(model=self.model, model_config=self.model_config, params=params,
                             layers=self.layers, hidden=self.hidden, heads=self.heads,
                             kv_heads=self.kv_heads, ffn=self.ffn, vocab=self.vocab, mlp=self.mlp,
                             dropout=self.dropout, extra=self._extra())

    def _extra(self) -> dict[str, Optional[int]]:
        """The MoE and window shape flags given (ARCH_EXTRA)."""
        return {k: getattr(self, k) for k in ARCH_EXTRA if getattr(self, k) is not None}

    def _hardware(self) -> HardwareProfile:
        return resolve_hardware(hardware=self.hardware, hardware_file=self.hardware_file,
                                gpus_per_node=self.gpus_per_node, gpu_memory_gb=self.gpu_memory_gb,
                                nic_gbit_per_gpu=self.nic_gbit)

    def _framework(self) -> Optional[FrameworkProfile]:
        from planner.specs.framework import load_framework
        return None if self.framework is None else load_framework(self.framework)

    def _batch(self, gpus: Optional[int]) -> tuple[int, int, str]:
        from planner.io.numbers import parse_number
        tpb = (parse_number("--tokens-per-batch", self.tokens_per_batch)
               if self.tokens_per_batch else None)
        return resolve_batch(seq_len=self.seq_len, global_batch=self.global_batch,
                             tokens_per_batch=tpb, gpus=gpus)

    def model_spec(self) -> ModelSpec:
        self._resolve(want_model=True)
        return self._parts["model"]

    def hardware_profile(self) -> HardwareProfile:
        self._resolve(want_model=False)
        return self._parts["hardware"]

    def framework_profile(self) -> Optional[FrameworkProfile]:
        """The profile --framework names (None: the default), resolved with the other parts;
        every estimate of this job is given it explicitly."""
        self._resolve(want_model=False)
        return self._parts.get("framework")

    def batch(self, gpus: Optional[int] = None) -> tuple[int, int, str]:
        """(seq, global batch, note); with `gpus`, a token budget rounds to a batch the data-
        parallel degrees of that GPU count divide."""
        self._resolve(want_model=False)
        return self._parts["batch"] if gpus is None else self._batch(gpus)

    def given(self) -> list[str]:
        """The options the user typed, spelled as on the command line."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self)
                if f.init and getattr(self, f.name) not in (None, False)]

    def offer(self) -> Optional[dict[str, Any]]:
        """With --params: the nearest real preset (by parameter count) and how to plan it,
        found once per run (the model resolution and the printout both ask)."""
        if "offer" not in self._parts:
            self._parts["offer"] = self._nearest()
        return self._parts["offer"]

    def _nearest(self) -> Optional[dict[str, Any]]:
        if self.params is None:
            if self.nearest_preset:
                raise InputError("--nearest-preset", "needs --params N (the count whose nearest "
                                 "preset to plan)")
            return None
        from planner.io import validate as v
        from planner.specs.presets import nearest_preset
        n = v.positive("--params", parse_number("--params", self.params), upper=v.MAX_PARAMS)
        name, spec = nearest_preset(n)
        return {"preset": name, "name": spec.name, "params": spec.param_count(),
                "layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads,
                "kv_heads": spec.kv_heads, "ffn": spec.ffn, "planned": self.nearest_preset,
                "use": f"--model {name}"}


# ---- files: a plan or an engine config ----------------------------------------------------------

def resolve_file(path: str, opts: CheckOptions,
                 hardware: HardwareProfile | None = None) -> tuple[Job, str, FileKind]:
    """(Job, the file's text, its kind) for a plan file or an engine config (DeepSpeed JSON,
    Megatron-LM arguments, torchtitan TOML), with ``opts`` supplying what the file cannot state
    and overriding its batch / recompute / precision keys; ``hardware`` (a profile already
    loaded, e.g. a calibrated one) replaces the file's."""
    from pathlib import Path

    from planner import framework_configs as ec
    from planner.resolve.plan_file import validate_plan
    from planner.specs.hardware_toml import load_hardware
    from planner.resolve.sections import resolve_plan

    where = str(path)
    text, fmt, data = ec.load_any(path, opts.engine)
    # detect() names an engine or "plan"; --engine is a choice among the same names
    kind = cast("FileKind", opts.engine or ec.detect(where, fmt, data, text))
    if kind != "plan":
        job = ec.read_engine(kind, where, text, data, opts)
        if hardware is not None:
            job.hardware = hardware
        return _deepspeed_only(job, kind, opts), text, kind
    plan = validate_plan(data, where, text)
    found = Problems()
    model = found.run(ec.given_model, opts) if opts.model or opts.params else None
    if hardware is None and opts.hardware:
        hardware = found.run(load_hardware, opts.hardware)
    found.check()
    job = resolve_plan(plan, Path(path).parent, where, model=model, hardware=hardware,
                       overrides=opts, text=text)
    return _deepspeed_only(job, kind, opts), text, kind


def _deepspeed_only(job: Job, kind: str, opts: CheckOptions) -> Job:
    """--tp, --pp and --ep supply what a DeepSpeed config cannot state (Megatron-DeepSpeed and
    DeepSpeed-MoE set them in the model code); any other file states its own: said, not
    applied."""
    given = [f"--{n} {v}" for n, v in (("tp", opts.tp), ("pp", opts.pp), ("ep", opts.ep))
             if v is not None]
    if given and kind != "deepspeed":
        job.notes.append(f"{', '.join(given)} not applied: a {kind} file states its own layout "
                         "(these options supply what a DeepSpeed config cannot)")
    return job
