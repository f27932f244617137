"""Stable Diffusion XL on the streaming engine: the pipeline, its text encoders, UNet and VAE decoder."""

from engine.sdxl.conditioning import Conditioning, TextEncoders
from engine.sdxl.pipeline import Pipeline, Result
from engine.sdxl.unet import UNet
from engine.sdxl.vae import VAEDecoder

__all__ = ["Conditioning", "Pipeline", "Result", "TextEncoders", "UNet", "VAEDecoder"]
