"""The defaults of a picture request: one place for the pipeline, `slowframe generate` and the frame's config (the sdxl recipe's; the few-step recipes carry their own in engine/sdxl/recipes.py)."""

STEPS = 20
GUIDANCE = 5.0        # classifier-free guidance; diffusers' SDXL default, in the 5-8 SDXL likes
