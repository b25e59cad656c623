"""One option name, metavar, default and help per concept across every command; old spellings
still work; each command lists only what it uses; numbers with K/M/B/T (and 8k for sequences)
everywhere; `--params` names the nearest real preset (issue #16)."""

from __future__ import annotations

import json
import typing
from collections import defaultdict

import pytest
import typer
from hypothesis import given, strategies as st
from typer.models import OptionInfo

from conftest import run_dtplan as dtplan
from planner.cli import knob_options, options
from planner.cli.dispatch import register
from planner.cli.options import OLD_SPELLINGS
from planner.cli.root import app
from planner.io.numbers import format_number, parse_number
from planner.specs.presets_modern import modern_presets
from planner.specs.presets import PRESETS, nearest_preset


def _commands():
    register([])
    out = {}

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])
        if path and not getattr(cmd, "commands", None):
            out[" ".join(path)] = cmd
    walk(typer.main.get_group(app), [])
    return out


COMMANDS = _commands()


def _options(cmd):
    return [p for p in cmd.params if p.param_type_name == "option"]


def _default(x):
    return getattr(x, "value", x)


def _shape(o):
    """What a user sees of one option: its names, help and metavar."""
    return (tuple(o.opts), tuple(o.secondary_opts), o.help, o.metavar)


def _declared() -> dict[str, list[tuple]]:
    """The shape of every declaration in the shared option set, by its first name."""
    found = [*vars(options).values(), *vars(knob_options).values(),
             *knob_options.KNOB_OPTIONS.values()]
    out = defaultdict(list)
    for d in found:
        info = next((m for m in typing.get_args(d)[1:] if isinstance(m, OptionInfo)), None)
        if info is None:
            continue
        names = [info.default, *info.param_decls]     # in Annotated, typer's default is a name
        opts = tuple(n.split("/")[0] for n in names)
        secondary = tuple(n.split("/")[1] for n in names if "/" in n)
        out[opts[0]].append((opts, secondary, info.help, info.metavar))
    return out


def test_every_option_two_commands_share_comes_from_the_shared_set():
    users = defaultdict(list)
    for name, cmd in COMMANDS.items():
        for o in _options(cmd):
            users[o.opts[0]].append((name, o))
    declared = _declared()
    defaults = defaultdict(set)
    for flag, uses in users.items():
        if len(uses) < 2 and flag not in declared:
            continue   # an option of one command only
        for command, o in uses:
            if o.name == "help":
                continue
            assert flag in declared, f"{command} {flag}: shared by several commands but not " \
                                     "declared in planner/cli/options.py"
            assert _shape(o) in declared[flag], f"{command} {flag} differs from its declaration"
            defaults[_shape(o)].add(repr(_default(o.default)))
    # one declaration, one default: a command whose default differs declares a variant
    assert not {s: d for s, d in defaults.items() if len(d) > 1}


def test_one_name_per_concept():
    declared = _declared()
    for flag, shapes in declared.items():                    # a variant says how it differs
        assert len({help for _, _, help, _ in shapes}) == len(set(shapes)), flag
    for name, cmd in COMMANDS.items():
        opts = _options(cmd)
        current = {o.opts[0] for o in opts}
        for o in opts:
            assert set(o.opts[1:]) <= {"-f", "-o", "-m", "-h"}   # one spelling per option
            if o.opts[0] in OLD_SPELLINGS:                  # an older spelling: listed nowhere,
                assert o.hidden and OLD_SPELLINGS[o.opts[0]] in current, (name, o.opts)
            elif o.opts[0] in OLD_SPELLINGS.values():       # and taken wherever its concept is
                old = {k for k, x in OLD_SPELLINGS.items() if x == o.opts[0]}
                assert old <= current, (name, o.opts)
    # the spellings issue #16 found for one concept are now older spellings of one option
    assert {"--price-per-gpu-hour", "--async", "--mtbf-hours", "--nic-gbit",
            "--gpu-memory-gb"} <= set(OLD_SPELLINGS)


@pytest.mark.parametrize("old,new,args", [
    ("--price-per-gpu-hour", "--gpu-hour-cost", ["checkpoint", "--params", "7e9", "--gpus", "8",
                                                 "--train-tokens", "1T", "--tokens-per-s", "1M"]),
    ("--async", "--async-checkpoint", ["checkpoint", "--params", "7e9", "--gpus", "8"]),
    ("--mtbf-hours", "--job-mtbf-hours", ["checkpoint", "--cost-min", "3"]),
    ("--nic-gbit", "--nic-gbit-per-gpu", ["estimate", "--model", "llama3-8b", "--gpus", "16"]),
    ("--gpu-memory-gb", "--gpu-memory-gib", ["memory", "--model", "llama3-8b", "--gpus", "8"]),
])
def test_old_spellings_still_work_and_help_lists_one(old, new, args):
    value = [] if "async" in old else ["50" if "mtbf" in old else "2" if "cost" in old else "100"]
    a = dtplan(*args, old, *value, "-f", "json")
    b = dtplan(*args, new, *value, "-f", "json")
    assert a.code == b.code and a.code in (0, 1), (a, b)
    assert a.json() == b.json()
    base = dtplan(*args, "-f", "json") if "mtbf" not in old else None
    assert base is None or base.json() != b.json()           # and the option does something
    shown = dtplan(args[0], "--help", old, *value).out       # an alias before --help still parses
    assert new in shown and old not in shown.replace(new, "")


def test_memory_lists_no_time_or_cost_options_and_estimate_does():
    memory = {o.opts[0] for o in _options(COMMANDS["memory"]) if not o.hidden}
    estimate = {o.opts[0] for o in _options(COMMANDS["estimate"]) if not o.hidden}
    timing = {"--train-tokens", "--gpu-hour-cost", "--gpu-mtbf-hours", "--job-mtbf-hours",
              "--async-checkpoint", "--doc-tokens"}
    assert not memory & timing and timing <= estimate
    assert estimate - memory == timing | {"--nic-gbit-per-gpu"}   # memory reads no network
    shown = dtplan("memory", "--help").out
    assert not any(f in shown for f in timing | {"--nic-gbit"})
    # an older script that passed them still runs, and is told they do nothing here
    a = dtplan("memory", "--model", "llama3-8b", "--train-tokens", "1T", "--nic-gbit", "100")
    b = dtplan("memory", "--model", "llama3-8b")
    assert a.code == b.code and a.out == b.out
    assert a.err == "dtplan: note: --train-tokens is for `dtplan estimate`; memory ignores it\n"
    bad = dtplan("memory", "--async-checkpoint")   # an input error stays one line
    assert bad.code == 2 and bad.err.count("\n") == 1 and "--model" in bad.err


# ---- numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("short,long", [
    (["memory", "--params", "7e9", "--gpus", "8", "--seq-len", "8k"],
     ["memory", "--params", "7e9", "--gpus", "8", "--seq-len", "8192"]),
    (["estimate", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "32K"],
     ["estimate", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "32768"]),
    (["fit", "--params", "70B", "--gpus", "256", "--tokens-per-batch", "4M", "--top", "2"],
     ["fit", "--params", "70000000000", "--gpus", "256", "--tokens-per-batch", "4000000",
      "--top", "2"]),
    (["estimate", "--model", "llama3-8b", "--gpus", "8", "--train-tokens", "15T"],
     ["estimate", "--model", "llama3-8b", "--gpus", "8", "--train-tokens", "15e12"]),
    (["layout", "--gpus", "1k", "--tp", "8"], ["layout", "--gpus", "1000", "--tp", "8"]),
    (["memory", "--params", "70b", "--gpus", "8"], ["memory", "--params", "70B", "--gpus", "8"]),
    (["memory", "--layers", "32", "--hidden", "4k", "--heads", "32", "--vocab", "32k"],
     ["memory", "--layers", "32", "--hidden", "4000", "--heads", "32", "--vocab", "32000"]),
])
def test_suffixes_mean_the_same_number(short, long):
    a, b = dtplan(*short, "-f", "json"), dtplan(*long, "-f", "json")
    assert a.code == b.code and a.code in (0, 1), (a, b)
    assert a.json() == b.json()


def test_128k_is_a_power_of_two_for_sequences():
    j = dtplan("memory", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "128K", "--tp", "8",
               "--cp", "1", "-f", "json").json()
    assert j["seq_len"] == 131072


@pytest.mark.parametrize("args,option", [
    (["memory", "--params", "7e9", "--seq-len", "8.5"], "--seq-len"),
    (["memory", "--params", "7e9", "--seq-len", "eightk"], "--seq-len"),
    (["fit", "--model", "llama3-8b", "--gpus", "8", "--top", "1.5"], "--top"),
    (["bubble", "--stages", "4x", "--micro-batches", "8"], "--stages"),
    (["estimate", "--model", "llama3-8b", "--gpu-hour-cost", "two"], "--gpu-hour-cost"),
    (["calibrate", "--from", "x", "--warmup-steps", "-1"], "--warmup-steps"),
])
def test_a_bad_number_names_its_option_in_one_line(args, option):
    r = dtplan(*args)
    assert r.code == 2 and r.err.startswith(f"dtplan: error: {option}: ") and r.err.count("\n") == 1
    assert "Traceback" not in r.err


@given(st.integers(min_value=1, max_value=10**15), st.booleans())
def test_format_round_trips_through_the_parser(n, sequence):
    text = format_number(n, sequence=sequence)
    assert parse_number("--x", text, sequence=sequence) == n
    assert len(text) <= len(str(n))


@pytest.mark.parametrize("n,sequence,text", [(4_000_000, False, "4M"), (4 * 2**20, False, "4Mi"),
                                              (8192, True, "8k"), (131072, True, "128k"),
                                              (15 * 10**12, False, "15T"), (4096, False, "4Ki"),
                                              (70_553_706_496, False, "70553706496")])
def test_format_is_the_short_exact_form(n, sequence, text):
    assert format_number(n, sequence=sequence) == text


# ---- --params: the nearest real preset ---------------------------------------------------------

def test_nearest_preset_by_parameter_count():
    assert nearest_preset(70e9)[0] == "llama3-70b"       # 70.55B beats Llama-2-70B's 68.98B
    assert nearest_preset(7e9)[0] == "llama2-7b"
    assert nearest_preset(405e9)[0] == "llama3.1-405b"
    assert not nearest_preset(46.7e9)[1].is_moe           # a bare count is a dense model
    # each dense Llama/GPT-layout preset is its own nearest; today's families (QK-norm,
    # windows, Gemma's four norms) are not offered for a Llama-style inferred shape
    modern = {name for name, _, _ in modern_presets()}
    for name, spec in PRESETS.items():
        if not spec.is_moe and name not in modern:
            found = nearest_preset(spec.param_count())[1]
            assert found.param_count() == spec.param_count()
    assert nearest_preset(8.19e9)[0] == "llama3-8b"       # not Qwen3-8B


def test_fit_params_says_the_nearest_preset_first():
    r = dtplan("fit", "--params", "70e9", "--gpus", "256", "--top", "2")
    assert r.code == 0
    first = r.out.splitlines()[0]
    assert first.startswith("Nearest real preset: llama3-70b (Llama-3-70B, 70.55B params, L=80")
    assert "--model llama3-70b" in r.out.split("\n\n")[0] and "--nearest-preset" in r.out
    md = dtplan("fit", "--params", "70e9", "--gpus", "256", "--top", "2", "-f", "markdown")
    assert md.out.startswith("Nearest real preset: llama3-70b")
    j = dtplan("fit", "--params", "70e9", "--gpus", "256", "--top", "2", "-f", "json").json()
    assert j["nearest_preset"] == {"preset": "llama3-70b", "name": "Llama-3-70B",
                                   "params": 70553706496, "layers": 80, "hidden": 8192,
                                   "heads": 64, "kv_heads": 8, "ffn": 28672, "planned": False,
                                   "use": "--model llama3-70b"}
    assert j["model"] == "inferred-70b"


def test_nearest_preset_flag_plans_the_preset():
    a = dtplan("estimate", "--params", "70e9", "--nearest-preset", "--gpus", "64", "--tp", "8",
               "--pp", "2", "--zero", "1", "-f", "json").json()
    b = dtplan("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
               "--zero", "1", "-f", "json").json()
    assert a.pop("nearest_preset")["planned"] is True
    assert a == b
    t = dtplan("fit", "--params", "70e9", "--nearest-preset", "--gpus", "256", "--top", "1")
    assert t.out.startswith("Planning the nearest real preset to --params: llama3-70b")
    assert "Llama-3-70B on 256" in t.out and "INFERRED" not in t.out


def test_nearest_preset_needs_params():
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "8", "--nearest-preset")
    assert r.code == 2 and r.err.startswith("dtplan: error: --nearest-preset: needs --params")


def test_checkpoint_splits_experts_as_estimate_does():
    # Mixtral's busiest rank under ZeRO-1 on 64 GPUs: the same bytes estimate prints at EP 1/4/8
    for ep, busiest in ((1, 102.16e9), (4, 34.52e9), (8, 23.24e9)):
        j = dtplan("checkpoint", "--model", "mixtral-8x7b", "--gpus", "64", "--zero", "1",
                   "--ep", str(ep), "-f", "json").json()
        e = dtplan("estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--zero", "1",
                   "--ep", str(ep), "-f", "json").json()
        assert j["contents"] == e["resilience"]["contents"]
        assert round(j["contents"]["busiest_rank_bytes"], -7) == busiest
    r = dtplan("checkpoint", "--params", "7e9", "--gpus", "8", "--ep", "2")
    assert r.code == 2 and r.err.startswith("dtplan: error: --ep: needs a mixture-of-experts")


def test_checkpoint_defaults_to_estimates_failure_rate():
    from planner.api import DEFAULT_GPU_MTBF_S
    j = dtplan("checkpoint", "--model", "llama3-70b", "--gpus", "1024", "-f", "json").json()
    assert j["failures"]["job_mtbf_s"] == pytest.approx(DEFAULT_GPU_MTBF_S / 1024, rel=1e-12)
    same = dtplan("checkpoint", "--model", "llama3-70b", "--gpus", "1024", "--gpu-mtbf-hours",
                  repr(DEFAULT_GPU_MTBF_S / 3600), "-f", "json").json()
    assert json.dumps(j, sort_keys=True) == json.dumps(same, sort_keys=True)


def test_every_command_reads_every_option_it_declares():
    """A declared option that the command's body never reads is one that does nothing."""
    import ast
    import inspect
    import textwrap
    for name, cmd in COMMANDS.items():
        fn = cmd.callback
        while hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        body = tree.body[0].body
        used = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        for p in inspect.signature(fn).parameters:
            assert p in used, f"dtplan {name}: option {p} is declared and never read"


@pytest.mark.parametrize("args", [
    ["fit", "--params", "70e9", "--gpus", "256", "--top", "1"],
    ["fit", "--params", "70e9", "--gpus", "64,128", "--top", "1"],
    ["estimate", "--params", "7e9", "--gpus", "8"],
    ["memory", "--params", "7e9", "--gpus", "8", "--seq-len", "4k"],
], ids=lambda a: " ".join(a[:2] + a[4:6]))
def test_the_nearest_preset_field_is_in_the_schema(args):
    import jsonschema
    out = dtplan(*args, "-f", "json").json()
    assert out["nearest_preset"]["preset"] in ("llama3-70b", "llama2-7b")
    jsonschema.validate(out, json.loads(dtplan("schema", args[0]).out))


def test_export_with_params_names_the_nearest_preset_on_stderr():
    r = dtplan("export", "--params", "7e9", "--gpus", "8", "--to", "torchtitan")
    assert r.code == 0
    assert "dtplan: note: Nearest real preset: llama2-7b (Llama-2-7B, 6.74B" in r.err
