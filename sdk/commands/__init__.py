"""Subcommands of the ``stockade`` CLI, one module each."""
