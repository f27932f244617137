"""Stable Diffusion XL on the streaming engine."""

from engine.sdxl.unet import UNet

__all__ = ["UNet"]
