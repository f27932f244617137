"""The display's error type: problems a user can fix, with a message meant for people."""


class DisplayError(Exception):
    """A bad panel name, palette, picture or setting, or a panel that cannot be reached."""


class PanelBusyError(DisplayError):
    """The panel did not signal the end of a refresh in time (its BUSY line timed out)."""
