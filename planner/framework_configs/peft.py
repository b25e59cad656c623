"""A fine-tune's adapters in an exported config: the engines dtplan writes have no LoRA of their
own, so the recipe goes beside the config as the HF PEFT / bitsandbytes objects a training script
builds (DeepSpeed and Accelerate run PEFT models as they are), and is refused where the engine
cannot train a frozen base with adapters at all."""

from __future__ import annotations

from planner.errors import InputError
from planner.specs.finetune import Tuning

# PEFT's module names for the Llama family (peft utils/constants.py)
PEFT_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
              "up": "up_proj", "down": "down_proj"}
# What each engine lacks (read at the commits their writers cite)
NO_LORA = {
    "megatron": "Megatron-LM has no LoRA or quantised frozen base (NeMo's PEFT adds them)",
    "torchtitan": "torchtitan trains every weight: it has no LoRA adapters or NF4 base",
}


def refuse(target: str, t: Tuning) -> None:
    """An InputError naming what the engine lacks, for a fine-tune it cannot express."""
    if t.frozen and target in NO_LORA:
        raise InputError("--to", f"{target} cannot express --finetune {t.mode}: {NO_LORA[target]}; "
                                 "export --to deepspeed or accelerate and build the adapters "
                                 "with HF PEFT (the note prints its LoraConfig)")


def peft_note(t: Tuning) -> str:
    """The LoraConfig (and BitsAndBytesConfig for a quantised base) this recipe stands for."""
    targets = ", ".join(repr(PEFT_NAMES[x]) for x in t.targets)
    text = (f"{t.mode}: the adapters live in the training script, not in this config: "
            f"peft.LoraConfig(r={t.rank}, lora_alpha={t.alpha}, target_modules=[{targets}], "
            f"lora_dropout={0.05 if t.dropout else 0.0}, bias=\"none\")")
    if t.base_format.startswith("nf4"):
        text += ("; transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="
                 f"\"nf4\", bnb_4bit_use_double_quant={t.base_format == 'nf4-dq'}, "
                 "bnb_4bit_compute_dtype=torch.bfloat16)")
    elif t.base_format == "int8":
        text += "; transformers.BitsAndBytesConfig(load_in_8bit=True)"
    if t.quantised:  # what the Accelerate and DeepSpeed profiles price (quantised_base_rest_fp32)
        text += ("; peft.prepare_model_for_kbit_training(model) before get_peft_model (it casts "
                 "the embeddings, head and norms to fp32)")
    return text + ("; dtplan check of this file prices full fine-tuning (an engine config "
                   "states no adapters): check the plan itself for the fine-tune's verdict")
