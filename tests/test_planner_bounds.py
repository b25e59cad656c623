"""Bounded time and memory in the planner's largest allowed ranges (issue 29, class 6): one fit
prices at most blocks.MAX_PRICED structurally valid layouts over its GPU counts and follow-up
searches (what would fit, a bigger batch), and with --all, which keeps every valid row,
blocks.MAX_PRICED_ALL; a space over the bound is refused before any block is priced, in one
line naming the options that narrow it. The bound is the search's own count. CPU seconds and
peak memory are benchmarks/bounds.py's, never asserted here."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import one_input_error, run_dtplan
from planner.api import fit, get_preset, load_profile, problem
from planner.search import blocks
from planner.search import fast
from planner.search.fast import SearchSpace, search
from planner.search.would_fit import any_fits

# Mixtral-8x7B's published config.json (size fields), as a user passes it with --model-config
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
           "intermediate_size": 14336, "model_type": "mixtral", "num_attention_heads": 32,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False,
           "vocab_size": 32000}


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mixtral") / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    return str(path)


def _json(r) -> dict:
    assert r.code in (0, 1) and "Traceback" not in r.err, (r.code, r.err[-400:])
    return r.json()


# ---- through dtplan: the issue's command answers, the --all space over its bound is refused ----

def test_the_issues_mixtral_fit_all_with_offload_on_8192_gpus_answers(mixtral):
    # --allow-offload without --framework plans on DeepSpeed (no hybrid sharding): a few
    # thousand layouts, every valid one ranked
    j = _json(run_dtplan("fit", "--all", "--allow-offload", "--gpus", "8192",
                         "--model-config", mixtral, "-f", "json"))
    assert j["valid"] > 0 and j["layouts"] and j["offload_searched"]


def test_fit_all_over_its_bound_is_refused_in_one_line_naming_the_options(mixtral):
    # on Megatron the same question has 1,088,928 structurally valid layouts (2,085,888 before
    # its MoE layouts under TP ran with sequence parallel only): --all would keep and evaluate
    # each (1.76 GB measured at 1.09 M, before the bound); refused before any is priced
    r = run_dtplan("fit", "--all", "--allow-offload", "--gpus", "8192", "--model-config",
                   mixtral, "--framework", "megatron", "-f", "json")
    line = one_input_error(r, "dtplan: error: layout space: ", "1,088,928 structurally valid",
                           f"over the {blocks.MAX_PRICED_ALL:,} one fit --all keeps",
                           "drop --all", "--tp", "--pp", "--ep", "--micro-batch",
                           "--global-batch")
    assert r.out == "", line
    # without --all the same space is searched (its front kept), and answers
    j = _json(run_dtplan("fit", "--allow-offload", "--gpus", "8192", "--model-config", mixtral,
                         "--framework", "megatron", "--ep", "8", "--zero", "1", "-f", "json"))
    assert j["valid"] > 0 and j["layouts"]


def test_a_sweep_with_all_shares_the_all_bound(monkeypatch, capsys):
    # every count's valid rows are kept until the sweep is shown: the counts share one --all
    # bound, lowered here to what the first two price; the three counts are refused together,
    # before any is searched, naming --all
    from planner.cli.dispatch import run
    from planner.specs.model import model_from_params
    spent = sum(fit(model_from_params(8e9), load_profile("h100"), n, seq_len=4096,
                    global_batch=256, dominated=True).search_result.priced for n in (8, 16))
    monkeypatch.setattr(blocks, "MAX_PRICED_ALL", spent)
    argv = ["fit", "--params", "8e9", "--gpus", "8,16", "--seq-len", "4096", "--global-batch",
            "256", "--all", "-f", "json"]
    assert run(argv) == 0
    capsys.readouterr()
    third = fit(model_from_params(8e9), load_profile("h100"), 32, seq_len=4096,
                global_batch=256).search_result.priced   # the front's bound: not refused
    assert run(argv[:4] + ["8,16,32"] + argv[5:]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "drop --all" in err, err
    assert f"{spent + third:,} structurally valid layouts to price and keep (--all keeps every " \
        f"valid one) over its 3 GPU counts, over the {spent:,} one fit --all keeps;" in err


def _never(*a, **k):
    raise AssertionError("priced before the refusal")


@pytest.mark.parametrize("framework", [None, "megatron"])
def test_a_sweep_over_its_bound_is_refused_before_any_count_is_searched(monkeypatch, framework):
    # 70B on six counts with --all: each count alone is within the bound (255,360 at most),
    # together 1.34 M (with offload on Megatron 3.04 M). The refusal came at the fourth count,
    # after three whole searches (5.7 s, 420 MB); now every count is counted first and no
    # search runs at all
    searched = []
    monkeypatch.setattr(fast, "crossed_memory_parts", _never)
    monkeypatch.setattr(fast, "evaluate", _never)
    monkeypatch.setattr(fast, "passing_blocks", lambda *a, **k: searched.append(a) or iter(()))
    counts = (256, 512, 1024, 2048, 4096, 8192)
    extra = ["--allow-offload", "--framework", framework] if framework else []
    r = run_dtplan("fit", "--all", *extra, "--model", "llama3-70b", "--gpus",
                   ",".join(map(str, counts)))
    line = one_input_error(r, "dtplan: error: layout space: ", "over its 6 GPU counts",
                           f"over the {blocks.MAX_PRICED_ALL:,} one fit --all keeps;",
                           "drop --all", "--tp", "--pp", "--cp", "--ep", "--zero",
                           "--micro-batch", "--global-batch", "fewer GPU counts")
    assert searched == [] and r.out == "", line
    from planner.specs.framework import load_framework
    fw = load_framework(framework) if framework else None
    total = sum(blocks.space_priced(problem(get_preset("llama3-70b"), load_profile("h100"), n,
                                            seq_len=4096, global_batch=1024, framework=fw),
                                    SearchSpace(allow_offload=bool(framework))) for n in counts)
    assert f" {total:,} structurally valid layouts" in line and total > blocks.MAX_PRICED_ALL


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 64), st.sampled_from([1, 3, 16, 96, 256]), st.booleans(),
       st.sampled_from([None, 2, 4]))
def test_the_up_front_count_is_the_searchs_own(gpus, batch, offload, tp):
    # what a sweep sums before it searches is exactly what each search prices
    from planner.specs.model import model_from_params
    p = problem(model_from_params(8e9), load_profile("h100"), gpus, seq_len=4096,
                global_batch=batch)
    space = SearchSpace(allow_offload=offload, tp=tp)
    assert blocks.space_priced(p, space) == search(p, space).priced


def test_the_largest_presets_on_8192_gpus_with_all_and_offload_answer():
    for model in ("deepseek-v3", "kimi-k2"):
        j = _json(run_dtplan("fit", "--all", "--allow-offload", "--gpus", "8192", "--model",
                             model, "-f", "json"))
        assert j["valid"] > 0 and j["layouts"], model


def test_the_help_states_both_bounds_the_code_applies():
    text = " ".join(run_dtplan("fit", "--help").out.split())
    assert f"at most {blocks.MAX_PRICED:,} structurally valid" in text
    assert f"({blocks.MAX_PRICED_ALL:,} with --all" in text


# ---- the bound is the search's own count, checked before any block is priced ------------------

def _p70(gpus: int = 64, batch: int = 256):
    return problem(get_preset("llama3-70b"), load_profile("h100"), gpus, seq_len=4096,
                   global_batch=batch)


def test_the_all_bound_refuses_at_exactly_the_searchs_own_count(monkeypatch):
    p = _p70()
    priced = search(p, dominated=True).priced
    monkeypatch.setattr(blocks, "MAX_PRICED_ALL", priced)
    assert search(p, dominated=True).priced == priced
    monkeypatch.setattr(blocks, "MAX_PRICED_ALL", priced - 1)
    with pytest.raises(blocks.SpaceTooLarge, match="drop --all"):
        search(p, dominated=True)
    assert search(p).priced == priced   # the front's bound is MAX_PRICED


def test_a_refused_space_prices_nothing(monkeypatch):
    # refused up front: the cost model never runs (neither the memory parts nor an evaluation)
    def never(*a, **k):
        raise AssertionError("priced before the refusal")
    monkeypatch.setattr(fast, "crossed_memory_parts", never)
    monkeypatch.setattr(fast, "evaluate", never)
    monkeypatch.setattr(blocks, "MAX_PRICED_ALL", 10)
    with pytest.raises(blocks.SpaceTooLarge):
        search(_p70(), dominated=True)


# ---- follow-up searches spend what the fit left ------------------------------------------------

def test_any_fits_never_prices_more_than_its_budget():
    p = _p70(gpus=8)   # 70B on 8 GPUs: nothing fits, so the whole space is tried
    full = blocks.Budget(10**9)
    assert not any_fits(p, SearchSpace(), full) and not full.short
    spent = 10**9 - full.left
    assert spent == search(p).priced   # the same count as the search's
    small = blocks.Budget(spent // 2)
    assert not any_fits(p, SearchSpace(), small)
    assert small.short and 0 <= small.left <= spent // 2


def test_what_would_fit_stops_at_the_fits_budget_and_says_so(monkeypatch):
    import planner.search.fit as fit_module
    import planner.search.would_fit as would_fit
    model, hw = get_preset("llama3-70b"), load_profile("h100")
    whole = fit(model, hw, 8, seq_len=4096, global_batch=256)
    assert whole.suggestions and not any("not every fix" in s for s in whole.suggestions)
    spent = whole.search_result.priced
    for module in (fit_module, would_fit):   # nothing left to try fixes
        monkeypatch.setattr(module, "MAX_PRICED", spent + 1)
    cut = fit(model, hw, 8, seq_len=4096, global_batch=256)
    assert cut.suggestions[-1].startswith("not every fix was tried: one fit prices at most "
                                          f"{spent + 1:,} layouts"), cut.suggestions
    assert "--tp" in cut.suggestions[-1] and len(cut.suggestions) < len(whole.suggestions) + 1


def _advise(budget: blocks.Budget):
    # a base MFU every bigger batch clears: the advice is the smallest factor searched
    from planner.advice.batch import advise_fit
    p = problem(get_preset("llama3-8b"), load_profile("h100"), 128, seq_len=4096, global_batch=32)
    return advise_fit(p, SearchSpace(), mfu=1e-6, bubble=0.5, collective=0.3, budget=budget)


def _priced(batch: int) -> int:
    return search(problem(get_preset("llama3-8b"), load_profile("h100"), 128, seq_len=4096,
                          global_batch=batch)).priced


def test_batch_advice_searches_both_factors_within_its_budget():
    budget = blocks.Budget(10**9)
    advice = _advise(budget)
    assert advice is not None and advice.factor == 2 and set(advice.tried) == {"2×", "4×"}
    assert 10**9 - budget.left == _priced(64) + _priced(128) and not budget.short


def test_batch_advice_over_what_the_fit_left_is_skipped_never_refusing_the_fit():
    budget = blocks.Budget(0)
    assert _advise(budget) is None and budget.short and budget.left == 0


def test_batch_advice_tries_the_smaller_factor_when_the_larger_is_over_the_budget():
    two = _priced(64)
    assert _priced(128) > two   # 4x the batch has more micro-batch sizes
    budget = blocks.Budget(two)
    advice = _advise(budget)
    assert advice is not None and advice.factor == 2 and set(advice.tried) == {"2×"}
    assert budget.short and budget.left == 0


# ---- enumeration work linear in the splits, not in the layers ---------------------------------

@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 64), st.integers(1, 16))
def test_interleave_choices_equal_the_scan_of_every_chunk_count(layers, pp, max_chunks):
    # whole-layer chunks from the divisors of L / PP: the scan of every v up to L / PP, which
    # made fit --layers 10^7 --gpus 10^7 run for minutes, gives the same list (up to the
    # search's max_chunks, every v the layer rule admits: dtplan's default split, the end chunks
    # possibly empty, or a stated uneven one)
    from planner.engine.stages import layers_split_valid, uneven_splits
    from planner.search.space import interleave_choices
    scan = [v for v in range(2, max_chunks + 1)
            if layers_split_valid(layers, pp, v)
            or any(layers_split_valid(layers, pp, v, f, l_)
                   for f, l_ in uneven_splits(layers, pp, v))] + \
        [v for v in range(max_chunks + 1, layers // pp + 1) if layers % (pp * v) == 0]
    assert interleave_choices(layers, pp, max_chunks) == scan


def test_the_bounds_benchmark_prints_each_probes_cpu_and_peak_memory():
    # one planner probe, its inputs written on demand (no 200 MB trace for it); the figures
    # are printed, not asserted (a shared machine's timings are noise)
    import subprocess
    import sys

    from conftest import ROOT, child_env
    probe = "fit --all --allow-offload --gpus 8192 --model-config $TMP/mixtral-config.json " \
            "--framework deepspeed"
    r = subprocess.run([sys.executable, "benchmarks/bounds.py", "--only", probe, "--limit", "100"],
                       capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=200)
    assert r.returncode == 0, r.stderr[-400:]
    head, *rows = r.stdout.splitlines()
    assert head.split()[:6] == ["exit", "wall", "s", "CPU", "s", "peak"]
    assert len(rows) == 1 and rows[0].endswith("dtplan " + probe), rows
    code, _, cpu, peak_mb = rows[0].split()[:4]
    assert code == "0" and float(cpu) > 0 and float(peak_mb) > 10   # the child's own peak
