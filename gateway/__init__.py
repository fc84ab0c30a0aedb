"""The core: config, registry, planner, availability, naming, dispatch, daemon and CLI.

Submodules are imported where used (`from gateway.runtime._loading import load_config`); this package exports the names
other packages rely on. It imports nothing eagerly, so `consumers` may use `gateway.config` without a cycle.
"""

__all__ = ["availability", "config", "errors", "naming", "planner", "registry"]
