"""Everything Triad can expose and who may see it, as pure functions of catalogs, config and identity: descriptors and
the registry snapshot, upstream catalogs turned into sources (names, overrides, the ledger), availability, the
planner, provider schema profiles, per-client views with their pages, the core tools' descriptors, what crosses the
hop, and the reports of `triad plan` / `triad explain` and the console. No I/O.
"""

from gateway.registry._availability import Diagnostic
from gateway.registry._catalog import SERVING, UpstreamSnapshot, build_upstream_sources, upstream_of_key
from gateway.registry._core_tools import CORE_NAMES, DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS, core_source
from gateway.registry._descriptors import (
    EMPTY_REGISTRY,
    Registry,
    RegistryDiagnostic,
    ToolDescriptor,
    ToolSource,
    build_registry,
)
from gateway.registry._naming import parse_exposed_uri, prefix_active, sanitize_server_names
from gateway.registry._page_meta import with_page_meta
from gateway.registry._pinning import PinReason, listed_approved, withheld
from gateway.registry._reports import explain, plan_report, upstream_states
from gateway.registry._schemas import normalize
from gateway.registry._snapshot import ListedKind, Snapshot
from gateway.registry._views import (
    CURSOR_KEYS,
    MAX_CURSOR_CHARS,
    ClientView,
    SessionLists,
    down_upstream,
    narrow_to_name,
    paginate,
    pin_withheld,
    schema_profile,
    tool_facts,
    tool_wire,
)
from gateway.registry._wire import RUN_LIST_META_KEY, clean_result, expose_links, forwardable_meta, input_round

__all__ = [
    "CORE_NAMES",
    "CURSOR_KEYS",
    "DEFAULT_LIMIT",
    "EMPTY_REGISTRY",
    "MAX_CURSOR_CHARS",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "RUN_LIST_META_KEY",
    "SERVING",
    "ClientView",
    "Diagnostic",
    "ListedKind",
    "PinReason",
    "Registry",
    "RegistryDiagnostic",
    "SessionLists",
    "Snapshot",
    "ToolDescriptor",
    "ToolSource",
    "UpstreamSnapshot",
    "build_registry",
    "build_upstream_sources",
    "clean_result",
    "core_source",
    "down_upstream",
    "explain",
    "expose_links",
    "forwardable_meta",
    "input_round",
    "listed_approved",
    "narrow_to_name",
    "normalize",
    "paginate",
    "parse_exposed_uri",
    "pin_withheld",
    "plan_report",
    "prefix_active",
    "sanitize_server_names",
    "schema_profile",
    "tool_facts",
    "tool_wire",
    "upstream_of_key",
    "upstream_states",
    "with_page_meta",
    "withheld",
]
