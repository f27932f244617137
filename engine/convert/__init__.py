"""Model folders: import (diffusers folders and single-file SGM models, on the Pi
itself), verify, list, and LoRA styles merged at import or applied at run time.

    from engine.convert import import_model, verify_model
    import_model("sd_xl_base_1.0.safetensors", "models/sdxl-base", precision="uint8",
                 loras=[("styles/ink.safetensors", 0.8)])
    verify_model("models/sdxl-base")

Modules: sgm_keys (SGM <-> diffusers names), sgm_source and diffusers_source (what the
source holds), layout (what a model folder holds), importer, manifest, verify, lora,
project_files (tokenizers and scheduler supplied when the source has none), download
(fetch then import: hub says what to fetch, fetch gets one file over HTTP, resumed and
checked), commands (the CLI).
"""

from engine.convert.importer import import_model
from engine.convert.lora import attach_loras, open_loras
from engine.convert.verify import list_models, verify_model

__all__ = ["attach_loras", "import_model", "list_models", "open_loras", "verify_model"]
