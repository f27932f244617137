"""The engine's exceptions: problems a user can fix (bad files, bad inputs, a full disk), and Cancelled.

Each EngineError message says what is wrong, where (file, tensor name) and how to fix it, so
the CLI can print it as is instead of a traceback.
"""


class EngineError(Exception):
    """A problem with the user's model files or inputs, with a message meant for people."""


class ModelFileError(EngineError):
    """A model file is missing, truncated, corrupt, unsafe or does not match its config."""


class InputError(EngineError):
    """Arguments passed to a model have the wrong shape, dtype or values."""


class CheckpointMismatch(InputError):
    """A checkpoint folder holds another job's checkpoints; ``differences`` says how the settings differ."""

    def __init__(self, folder: object, differences: list[str]):
        self.folder = folder
        self.differences = differences
        super().__init__(f"{folder} holds checkpoints of a different job ({'; '.join(differences)}). Pass "
                         "restart=True to discard them and start this job over, or choose another checkpoint folder.")


class StorageError(EngineError):
    """The disk refused a write (full, read-only, failing); what was written before is intact."""


class NetworkError(EngineError):
    """A server could not be reached or broke off; what arrived is kept and a new run resumes."""


class Cancelled(Exception):
    """A run was asked to stop (a button, a signal); its last checkpoint is intact."""
