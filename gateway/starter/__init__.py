"""What a user needs to start, shipped in the wheel: the example config (`config.example.yaml`, which the
repository's root file links to) and the demo upstream it runs (`python -m gateway.starter.demo_upstream`).

`write_starter` is what `triad init [PATH]` does: it writes the example config, refusing to overwrite a file.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

EXAMPLE_CONFIG = "config.example.yaml"
DEFAULT_PATH = "triad.yaml"


def example_config() -> str:
    return files(__name__).joinpath(EXAMPLE_CONFIG).read_text(encoding="utf-8")


def write_starter(path: Path, *, force: bool = False) -> None:
    """Write the example config to `path`. Raises `FileExistsError` if it exists (unless `force`) and `OSError`
    if it cannot be written."""
    text = example_config()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w" if force else "x", encoding="utf-8") as stream:
        stream.write(text)
