"""Published LoRA / QLoRA memory figures against the model (issue 28): one line per row, its
source, the figure and three predictions with their residuals:
- fsdp: the bundled profile (bitsandbytes >= 0.43.2 through HF PEFT);
- before: as this benchmark priced litgpt's runs before the litgpt variants existed (the fsdp
  profile with MatMul4Bit saving its input, no PEFT kbit preparation);
- litgpt: the fsdp profile's variant for the era of the row's source (litgpt-2023 for the
  resource table, litgpt-2024 for the config hub; framework_profiles/fsdp.toml [variants],
  each value cited there): the NF4 output layer, fp16-quantised weights cast to bf16 in the
  matmul, the previous micro-batch's graph held through the next forward, and (2024) the
  RMSNorm's fp32 input.
The rows are tests/test_qlora_published.py's ROWS (LoRA rows: tests/test_finetune.py's litgpt
ones). All are torch.cuda.max_memory_allocated on one GPU, bf16 weights, LoRA dropout 0.05;
none is in reference/RESERVED.md. Asserts nothing (a benchmark, not a test).

    python benchmarks/finetune_memory.py
"""

from __future__ import annotations

import dataclasses
import os
import sys

import planner
from planner.specs.framework import FrameworkProfile, load_framework, with_variant
from planner.specs.knobs import Layout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
# the one list of rows, priced the one way the test prices them
from test_qlora_published import ROWS, TABLE, allocated_gb, era_variant  # noqa: E402


def before(fw: FrameworkProfile) -> FrameworkProfile:
    """The fsdp profile as this benchmark priced litgpt's runs before the variants: bitsandbytes
    < 0.43.2 (MatMul4Bit keeps its input), no PEFT kbit preparation, nothing else."""
    return dataclasses.replace(fw, memory=dataclasses.replace(
        fw.memory, quantised_linear_saves_input=True, quantised_base_rest_fp32=False))


LORA = [  # tests/test_finetune.py PUBLISHED's litgpt rows, same pages
    ("m011", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "bf16", 21.30),
    ("m016", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "bf16", 38.12),
    ("m057", "hub", "llama2-7b", "q,v", 32, 512, 2, "bf16", 19.77),
    ("m059", "hub", "llama3-8b", "q,v", 32, 512, 1, "bf16", 19.73),
]


# Collected, not in the test: torchtune's QLoRA tutorial (pytorch/torchtune@0914d5cfb
# docs/source/tutorials/qlora_finetune.rst:160-167, recipes/configs/llama2/
# 7B_qlora_single_device.yaml there: q,k,v,o and MLP, r 8, micro-batch 2, activation
# checkpointing, LoRA dropout 0.05, bf16, Alpaca at 512 tokens) prints peak *reserved* 9.29 GB in training and
# already 9.13 GB at model init, before any step: the allocator pool that loading and
# quantising left reserved, which the planner's step model does not price.
TORCHTUNE_QLORA = ("tt-7b-qlora-reserved", "llama2-7b", "all-linear", 8, 512, 2, "nf4-dq", 9.29)


def torchtune_reserved_gb() -> float:
    _id, model, targets, rank, seq, mb, fmt, _gb = TORCHTUNE_QLORA
    lay = Layout(finetune="qlora", base_format=fmt, lora_targets=targets, lora_rank=rank,
                 lora_dropout=True, precision="bf16-pure", optimizer="adamw", micro_batch=mb,
                 recompute="full")
    e = planner.estimate(planner.get_preset(model), planner.load_profile("a100-80g"), 1, lay,
                         seq_len=seq, global_batch=mb, framework=load_framework("torchtune"))
    return e.stages[0].reserved_bytes / 1e9


def main() -> None:
    fsdp = load_framework("fsdp")
    print(f"{'id':22} {'published':>9} {'fsdp':>15} {'before':>15} {'litgpt':>15}  variant")
    for row in LORA + ROWS:
        pub, var = row[-1], era_variant(row[1])
        cells = [allocated_gb(row, fw) for fw in (fsdp, before(fsdp), with_variant(fsdp, var))]
        text = [f"{g:6.2f} ({100 * (g / pub - 1):+5.1f}%)" for g in cells]
        print(f"{row[0]:22} {pub:9.2f} {text[0]:>15} {text[1]:>15} {text[2]:>15}  {var}")
    g, pub = torchtune_reserved_gb(), TORCHTUNE_QLORA[-1]
    print(f"{TORCHTUNE_QLORA[0]:22} {pub:9.2f} {'':>15} {'':>15} {g:6.2f} "
          f"({100 * (g / pub - 1):+5.1f}%)  torchtune profile, reserved (not explained)")


if __name__ == "__main__":
    main()
