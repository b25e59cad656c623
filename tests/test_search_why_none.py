"""Every empty or failing search names the rule and the value that killed it (issue #26),
through the real CLI: the verdict line names the rule that rejected the most layouts, its
example's value and what the rule allows; the JSON carries both per rule."""

from __future__ import annotations


def _verdict(run) -> str:
    text = " ".join(run.out.split())
    return text[text.index("DOES NOT FIT"):]


def test_tp_that_does_not_tile_the_nvlink_domain(dtplan):
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "48", "--tp", "3")
    assert r.code == 1
    v = _verdict(r)
    assert "tp-in-nvlink-domain rejected all" in v
    assert "(e.g. TP = 3; allowed: divides 8)" in v
    j = dtplan("fit", "--model", "llama3-8b", "--gpus", "48", "--tp", "3", "--format", "json")
    rej = j.json()["rejections"]
    assert [(x["rule"], x["measured"], x["limit"]) for x in rej] == \
        [("tp-in-nvlink-domain", "TP = 3", "divides 8")]


def test_a_batch_no_data_parallel_degree_divides(dtplan):
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "48", "--global-batch", "7", "--tp", "1",
               "--pp", "1")
    assert r.code == 1
    v = _verdict(r)
    assert "batch-divisible rejected all" in v and "7 / (1 × 48)" in v
    assert "allowed: whole number" in v


def test_a_space_emptied_by_fixed_knobs(dtplan):
    """DeepSpeed's pipeline engine runs ZeRO ≤ 1: fixing ZeRO-3 and PP 2 leaves nothing."""
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "64", "--zero", "3", "--pp", "2",
               "--framework", "deepspeed")
    assert r.code == 1
    v = _verdict(r)
    assert "zero-with-pp rejected" in v
    assert "(e.g. ZeRO 3, PP 2; allowed: ZeRO ≤ 1 when PP > 1 (deepspeed))" in v


def test_fixed_degrees_that_do_not_divide_the_gpus(dtplan):
    r = dtplan("fit", "--model", "llama3-8b", "--gpus", "64", "--tp", "3", "--pp", "2")
    assert r.code == 1
    assert "— nothing enumerated: TP 3 × PP 2 = 6 does not divide 64 GPUs" in _verdict(r)


def test_memory_names_the_closest_miss(dtplan):
    r = dtplan("fit", "--model", "llama3-70b", "--gpus", "8", "--tp", "8")
    assert r.code == 1
    v = _verdict(r)
    assert "fits-in-memory rejected" in v and "allowed: ≤" in v and "GB" in v
