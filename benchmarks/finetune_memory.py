"""Published LoRA / QLoRA memory figures against the model (issue 28): one line per row, its
source, the figure, the prediction and the residual. LoRA rows are tests/test_finetune.py's
PUBLISHED; the QLoRA rows are litgpt's, whose runs pinned bitsandbytes 0.41.1 (resource table)
and 0.42.0 (config hub, pyproject.toml at e549398), before MatMul4Bit stopped saving its input
(0.43.2): each is priced on the fsdp profile as bundled and as litgpt ran it (that
bitsandbytes; no PEFT prepare_model_for_kbit_training). All are torch.cuda.max_memory_allocated
on one GPU, bf16 weights, LoRA dropout 0.05, AdamW; none is in reference/RESERVED.md. Asserts
nothing (a benchmark, not a test).

    python benchmarks/finetune_memory.py
"""

from __future__ import annotations

import dataclasses

import planner
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.knobs import Layout

TABLE = "Lightning-AI/litgpt tutorials/resource-tables.md (lit-gpt 8641822, A100 40GB)"
HUB = "Lightning-AI/litgpt config_hub/finetune/README.md (1 x A10G)"
# id, source, model, targets, rank, seq, micro-batch, base format (bf16: LoRA), GB
ROWS = [
    ("m011", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "bf16", 21.30),
    ("m016", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "bf16", 38.12),
    ("m057", HUB, "llama2-7b", "q,v", 32, 512, 2, "bf16", 19.77),
    ("m059", HUB, "llama3-8b", "q,v", 32, 512, 1, "bf16", 19.73),
    ("lt-7b-nf4", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "nf4", 14.14),
    ("lt-7b-nf4-dq", TABLE, "llama2-7b", "q,v", 8, 1304, 1, "nf4-dq", 13.84),
    ("lt-13b-nf4", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "nf4", 23.14),
    ("lt-13b-nf4-dq", TABLE, "llama2-13b", "q,v", 8, 1304, 1, "nf4-dq", 22.55),
    ("hub-llama2-7b-qlora", HUB, "llama2-7b", "q,v", 32, 512, 2, "nf4", 13.68),
    ("hub-llama3-8b-qlora", HUB, "llama3-8b", "q,v", 32, 512, 2, "nf4", 17.41),
]


def litgpt(fw: FrameworkProfile) -> FrameworkProfile:
    """The fsdp profile as litgpt ran QLoRA: bitsandbytes < 0.43.2, no PEFT kbit preparation."""
    return dataclasses.replace(fw, memory=dataclasses.replace(
        fw.memory, quantised_linear_saves_input=True, quantised_base_rest_fp32=False))


def predicted_gb(row: tuple, fw: FrameworkProfile) -> float:
    _id, _src, model, targets, rank, seq, mb, fmt, _gb = row
    lay = Layout(finetune="lora" if fmt == "bf16" else "qlora", base_format=fmt,
                 lora_targets=targets, lora_rank=rank, lora_dropout=True, precision="bf16-pure",
                 optimizer="adamw", micro_batch=mb, recompute="none")
    e = planner.estimate(planner.get_preset(model), planner.load_profile("a100-80g"), 1, lay,
                         seq_len=seq, global_batch=mb, framework=fw)
    return e.stages[0].allocated_bytes / 1e9


def main() -> None:
    fsdp = load_framework("fsdp")
    print(f"{'id':20} {'published':>9} {'fsdp':>15} {'as litgpt ran':>15}  source")
    for row in ROWS:
        pub = row[-1]
        cells = [predicted_gb(row, fw) for fw in (fsdp, litgpt(fsdp))]
        text = [f"{g:6.2f} ({100 * (g / pub - 1):+5.1f}%)" for g in cells]
        print(f"{row[0]:20} {pub:9.2f} {text[0]:>15} {text[1]:>15}  {row[1]}")


if __name__ == "__main__":
    main()
