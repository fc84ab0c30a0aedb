"""The `triad` command line (`triad = gateway.cli:main`): every verb, the reports it prints, `triad import`."""

from gateway.cli._commands import main

__all__ = ["main"]
