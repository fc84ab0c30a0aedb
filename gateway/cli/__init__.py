"""The `triad` command line (`triad = gateway.cli:main`): every verb, the reports it prints, `triad import`."""

from gateway.cli._commands import main
from gateway.cli._importer import FORMATS, Conversion, convert

__all__ = ["FORMATS", "Conversion", "convert", "main"]
