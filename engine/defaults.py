"""The defaults of a picture request: one place for the pipeline, `slowframe generate` and the frame's config."""

STEPS = 20
GUIDANCE = 5.0        # classifier-free guidance; diffusers' SDXL default, in the 5-8 SDXL likes
TURBO_STEPS = 1       # SDXL-Turbo: one step, no guidance
TURBO_GUIDANCE = 0.0
