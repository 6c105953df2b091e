"""An example third-party execution provider for ep-host; the hooks live in ``provider``."""

__version__ = "0.1.0"
