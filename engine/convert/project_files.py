"""Files slowframe supplies when a single-file model comes without them: the two CLIP tokenizer
folders (from the CLIP vocabulary bundled in engine/data), SDXL base's scheduler config,
and model_index.json. They are the ones stabilityai/stable-diffusion-xl-base-1.0 ships,
so the folder also loads in diffusers as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.sdxl.tokenizer import BOS_TOKEN, EOS_TOKEN, STANDARD_MAX_LENGTH, standard_vocabulary

SCHEDULER_CONFIG = {
    "_class_name": "EulerDiscreteScheduler",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "interpolation_type": "linear",
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "sample_max_value": 1.0,
    "set_alpha_to_one": False,
    "skip_prk_steps": True,
    "steps_offset": 1,
    "timestep_spacing": "leading",
    "trained_betas": None,
    "use_karras_sigmas": False,
}

MODEL_INDEX = {
    "_class_name": "StableDiffusionXLPipeline",
    "force_zeros_for_empty_prompt": True,
    "scheduler": ["diffusers", "EulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}

# SDXL's tokenizer pads with EOS, tokenizer_2 with "!" (which makes "!" a special token).
PAD_TOKENS = {"tokenizer": EOS_TOKEN, "tokenizer_2": "!"}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_scheduler(folder: Path) -> None:
    write_json(folder / "scheduler_config.json", SCHEDULER_CONFIG)


def write_model_index(root: Path, force_zeros_for_empty_prompt: bool = True) -> None:
    write_json(root / "model_index.json", dict(MODEL_INDEX, force_zeros_for_empty_prompt=force_zeros_for_empty_prompt))


def write_tokenizer(folder: Path, pad_token: str) -> None:
    """A CLIPTokenizer folder as stabilityai's SDXL base has it: vocab.json, merges.txt,
    tokenizer_config.json, special_tokens_map.json."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = standard_vocabulary()
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
                                       encoding="utf-8")

    def token(content: str) -> dict:
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True, "rstrip": False,
                "single_word": False}

    pad = pad_token if pad_token == "!" else token(pad_token)
    specials = {"bos_token": token(BOS_TOKEN), "eos_token": token(EOS_TOKEN), "pad_token": pad,
                "unk_token": token(EOS_TOKEN)}
    config = {"add_prefix_space": False, "clean_up_tokenization_spaces": True, "do_lower_case": True,
              "errors": "replace", "model_max_length": STANDARD_MAX_LENGTH, "tokenizer_class": "CLIPTokenizer",
              **specials}
    write_json(folder / "tokenizer_config.json", config)
    write_json(folder / "special_tokens_map.json", specials)
