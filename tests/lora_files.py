"""LoRA files as kohya's training scripts save them, on modules of the tiny model (tests/tiny_models.py)."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

KOHYA_UNET = [   # (SGM spelling, diffusers spelling, out, in)
    ("input_blocks_4_1_transformer_blocks_0_attn1_to_q", "down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q",
     64, (64,)),
    ("input_blocks_7_1_transformer_blocks_2_attn2_to_k", "down_blocks_2_attentions_0_transformer_blocks_2_attn2_to_k",
     128, (192,)),
    ("middle_block_1_proj_in", "mid_block_attentions_0_proj_in", 128, (128,)),
    ("output_blocks_0_1_transformer_blocks_1_ff_net_0_proj",
     "up_blocks_0_attentions_0_transformer_blocks_1_ff_net_0_proj", 1024, (128,)),
    ("output_blocks_3_1_transformer_blocks_0_attn1_to_out_0",
     "up_blocks_1_attentions_0_transformer_blocks_0_attn1_to_out_0", 64, (64,)),
    ("input_blocks_1_0_in_layers_2", "down_blocks_0_resnets_0_conv1", 32, (32, 3, 3)),
    ("output_blocks_7_0_emb_layers_1", "up_blocks_2_resnets_1_time_emb_proj", 32, (128,)),
]


def kohya_lora(path, seed: int = 5, alpha: float = 2.0, rank: int = 4, spelling: str = "sgm"):
    """kohya's SDXL names: UNet modules in the original (SGM) block numbering or in
    diffusers' spelling (a file uses one), a 3x3 conv LoRA, both text encoders."""
    g = torch.Generator().manual_seed(seed)
    sd = {}

    def add(name, out, in_shape):
        conv = len(in_shape) == 3
        sd[f"{name}.lora_down.weight"] = (0.2 * torch.randn((rank, *in_shape), generator=g)).half()
        sd[f"{name}.lora_up.weight"] = (0.2 * torch.randn((out, rank, *((1, 1) if conv else ())), generator=g)).half()
        sd[f"{name}.alpha"] = torch.tensor(alpha).half()

    for sgm, diffusers, out, in_shape in KOHYA_UNET:
        add("lora_unet_" + (sgm if spelling == "sgm" else diffusers), out, in_shape)
    for layer in range(2):
        for proj in ("q_proj", "out_proj"):
            add(f"lora_te1_text_model_encoder_layers_{layer}_self_attn_{proj}", 64, (64,))
    add("lora_te1_text_model_encoder_layers_2_mlp_fc1", 128, (64,))
    add("lora_te2_text_model_encoder_layers_0_self_attn_out_proj", 128, (128,))
    add("lora_te2_text_model_encoder_layers_1_mlp_fc1", 256, (128,))
    save_file(sd, str(path))
    return path
