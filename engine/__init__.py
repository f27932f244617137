"""slowframe's streaming inference engine: SDXL on a few hundred MB of RAM."""

from engine.errors import EngineError, InputError, ModelFileError

__version__ = "0.1.0"

__all__ = ["EngineError", "InputError", "ModelFileError", "__version__"]
