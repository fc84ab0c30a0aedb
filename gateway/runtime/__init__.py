"""Assembling and running the daemon: reading a config file with every cross-package check (`load_config`), the root
task group that owns the pool, the dispatcher, the notifier and the exposers (`running_gateway`), hot reload, and the
cluster's wiring when the config has `cluster:`.
"""

from gateway.runtime._daemon import configure_logging, run_http, running_gateway, serve_stdio_client
from gateway.runtime._loading import load_config, parse_config
from gateway.runtime._reload import Reloader

__all__ = [
    "Reloader",
    "configure_logging",
    "load_config",
    "parse_config",
    "run_http",
    "running_gateway",
    "serve_stdio_client",
]
