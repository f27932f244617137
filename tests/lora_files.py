"""LoRA files as kohya's and diffusers' training scripts save them, on modules of the tiny model
(tests/tiny_models.py)."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from tiny_models import load_pipeline

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


def peft_lora(folder, path, seed: int = 7):
    """A diffusers/PEFT LoRA as diffusers' own training scripts save it, with lora_alpha in
    the file's metadata (alpha 8 over rank 4 in the UNet, 2 over 4 in the text encoders)."""
    from diffusers import StableDiffusionXLPipeline
    from peft import LoraConfig, inject_adapter_in_model
    from peft.utils import get_peft_model_state_dict

    pipe = load_pipeline(folder)
    unet_cfg = LoraConfig(r=4, lora_alpha=8, init_lora_weights="gaussian",
                          target_modules=["to_q", "to_v", "ff.net.2", "conv1", "proj_out"])
    text_cfg = LoraConfig(r=4, lora_alpha=2, init_lora_weights="gaussian", target_modules=["q_proj", "fc2"])
    pipe.unet.add_adapter(unet_cfg)
    for encoder in (pipe.text_encoder, pipe.text_encoder_2):   # PEFT itself (transformers wants a newer PEFT)
        inject_adapter_in_model(text_cfg, encoder)
    g = torch.Generator().manual_seed(seed)
    layers = {}
    for name in ("unet", "text_encoder", "text_encoder_2"):
        model = getattr(pipe, name)
        with torch.no_grad():
            for key, p in model.named_parameters():
                if "lora_B" in key:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g))
        layers[name] = get_peft_model_state_dict(model)
    StableDiffusionXLPipeline.save_lora_weights(
        path.parent, unet_lora_layers=layers["unet"], text_encoder_lora_layers=layers["text_encoder"],
        text_encoder_2_lora_layers=layers["text_encoder_2"], weight_name=path.name,
        unet_lora_adapter_metadata=unet_cfg.to_dict(), text_encoder_lora_adapter_metadata=text_cfg.to_dict(),
        text_encoder_2_lora_adapter_metadata=text_cfg.to_dict())
    return path
