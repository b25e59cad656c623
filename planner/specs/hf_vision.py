"""The vision tower beside a multimodal model's language model: its parameter count, stated in
the output (the planner plans the language model; the tower's weights, gradients and optimizer
state sit on the first pipeline stage in a real run).

Counts follow transformers 5.24.0 ``modeling_siglip.py`` (Gemma 3: SigLIP encoder + Gemma3's
projector) and ``modeling_llama4.py`` (Llama4VisionModel + Llama4MultiModalProjector).
"""

from __future__ import annotations

from typing import Any

SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                   "num_channels": 3, "image_size": 224, "patch_size": 16,
                   "vision_use_head": True}   # SiglipVisionConfig keyword defaults
LLAMA4_VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 5632,
                          "num_hidden_layers": 34, "num_channels": 3, "image_size": 448,
                          "patch_size": 14, "vision_output_dim": 7680,
                          "projector_input_dim": 4096, "projector_output_dim": 4096}


def _int(v: dict[str, Any], defaults: dict[str, Any], key: str) -> int:
    value = v.get(key, defaults.get(key))
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(key)
    return value


def _encoder_layer(hv: int, iv: int) -> int:
    """A ViT block: q, k, v, o with biases 4(H² + H), two LayerNorms 4H, MLP 2HI + I + H."""
    return 4 * (hv * hv + hv) + 4 * hv + 2 * hv * iv + iv + hv


def siglip_params(v: dict[str, Any], text_hidden: int) -> int:
    """SigLIP tower: patch conv C·p²·H + H, positions (img/p)²·H, L blocks, post LayerNorm 2H,
    the attention-pooling head when vision_use_head; plus Gemma 3's projector H·h + H (RMSNorm)."""
    d = SIGLIP_DEFAULTS
    hv, iv, lv = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size"), \
        _int(v, d, "num_hidden_layers")
    p, img, ch = _int(v, d, "patch_size"), _int(v, d, "image_size"), _int(v, d, "num_channels")
    tower = ch * p * p * hv + hv + (img // p) ** 2 * hv + lv * _encoder_layer(hv, iv) + 2 * hv
    if v.get("vision_use_head", d["vision_use_head"]):
        tower += hv + 4 * (hv * hv + hv) + 2 * hv + 2 * hv * iv + iv + hv
    return tower + hv * text_hidden + hv


def llama4_vision_params(v: dict[str, Any], text_hidden: int) -> int:
    """Llama 4 tower: unfold patch linear C·p²·H, class token H, positions ((img/p)² + 1)·H, pre
    and post LayerNorms 4H, L blocks, pixel-shuffle MLP I·P_in + P_out², projector O·h."""
    d = LLAMA4_VISION_DEFAULTS
    hv, iv, lv = _int(v, d, "hidden_size"), _int(v, d, "intermediate_size"), \
        _int(v, d, "num_hidden_layers")
    p, img, ch = _int(v, d, "patch_size"), _int(v, d, "image_size"), _int(v, d, "num_channels")
    p_in, p_out = _int(v, d, "projector_input_dim"), _int(v, d, "projector_output_dim")
    tower = (ch * p * p * hv + hv + ((img // p) ** 2 + 1) * hv + 4 * hv
             + lv * _encoder_layer(hv, iv) + iv * p_in + p_out * p_out)
    return tower + _int(v, d, "vision_output_dim") * text_hidden


def vision_params(vision: Any, mtype: str, text: dict[str, Any]) -> tuple[int, str]:
    """(vision tower parameters, the note saying so) for a multimodal wrapper's vision_config."""
    if not isinstance(vision, dict):
        return 0, "no vision_config: a vision tower, if any, is not counted"
    hidden = text.get("hidden_size")
    count = siglip_params if mtype == "gemma3" else llama4_vision_params
    try:
        n = count(vision, hidden if isinstance(hidden, int) else 0)
    except ValueError as e:
        return 0, f"vision_config.{e}: not a positive integer; the vision tower is not counted"
    return n, (f"vision tower {n:,} parameters (vision_config) beside the language model, "
               "not planned")
