"""docex: a self-hosted document extraction daemon."""

__version__ = "0.1.0"
