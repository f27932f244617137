"""A whole tiny SDXL model folder (diffusers layout) and the diffusers pipeline on it.

unet/ is tests/tiny_models.py's "tiny" UNet, vae/ tests/tiny_vae.py's "tiny" VAE,
text_encoder*/ and tokenizer*/ come from tests/tiny_clip.py (their widths, 32 + 64,
make the UNet's 96-wide context and 64-wide pooled vector), scheduler/ is SDXL
base's EulerDiscreteScheduler config. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEDULER_CONFIG = {
    "_class_name": "EulerDiscreteScheduler", "num_train_timesteps": 1000, "beta_start": 0.00085,
    "beta_end": 0.012, "beta_schedule": "scaled_linear", "timestep_spacing": "leading", "steps_offset": 1,
    "prediction_type": "epsilon", "interpolation_type": "linear", "use_karras_sigmas": False,
    "sample_max_value": 1.0, "clip_sample": False, "set_alpha_to_one": False, "skip_prk_steps": True,
}


def make_tiny_sdxl(root: Path):
    """Write the model under `root` (once) and return diffusers' fp32 StableDiffusionXLPipeline on it."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline

    from tiny_clip import make_text_model, reference_tokenizers
    from tiny_models import make_unet
    from tiny_vae import make_vae

    root = Path(root)
    unet = make_unet("tiny", root / "unet")
    vae = make_vae("tiny", root / "vae")
    text_encoder, text_encoder_2 = make_text_model(root)
    tokenizer, tokenizer_2 = reference_tokenizers(root)
    (root / "scheduler").mkdir(exist_ok=True)
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER_CONFIG, indent=1))
    return StableDiffusionXLPipeline(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2,
                                     tokenizer=tokenizer, tokenizer_2=tokenizer_2, unet=unet,
                                     scheduler=EulerDiscreteScheduler.from_config(SCHEDULER_CONFIG),
                                     force_zeros_for_empty_prompt=True, add_watermarker=False)
