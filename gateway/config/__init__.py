"""The configuration: one frozen pydantic model per YAML block (`TriadConfig` and its parts), YAML read with the line
of every key, and problems worded as `key.path: message (line N)`, never with a value. Reading a file and the checks
that span sub-packages are `gateway.runtime.load_config`.
"""

from gateway.config._approval import ApprovalConfig, ApprovalRule, AskMode
from gateway.config._auth import IntrospectionConfig, OAuthConfig
from gateway.config._limits import DEFAULT_LIMITS, LimitsConfig, Quota
from gateway.config._models import (
    PYTHON_VARIABLE,
    STANDARD_STREAM,
    ClusterConfig,
    Duration,
    HookSpec,
    NamingConfig,
    ToolsMode,
    TriadConfig,
    UpstreamConfig,
    is_loopback,
    resolve_path,
)
from gateway.config._problems import describe_error, format_problem, hide_values, variables_mask
from gateway.config._yaml import LineMap, Loaded, YamlProblem, load_with_lines

__all__ = [
    "DEFAULT_LIMITS",
    "PYTHON_VARIABLE",
    "STANDARD_STREAM",
    "ApprovalConfig",
    "ApprovalRule",
    "AskMode",
    "ClusterConfig",
    "Duration",
    "HookSpec",
    "IntrospectionConfig",
    "LimitsConfig",
    "LineMap",
    "Loaded",
    "NamingConfig",
    "OAuthConfig",
    "Quota",
    "ToolsMode",
    "TriadConfig",
    "UpstreamConfig",
    "YamlProblem",
    "describe_error",
    "format_problem",
    "hide_values",
    "is_loopback",
    "load_with_lines",
    "resolve_path",
    "variables_mask",
]
