"""The registry: rebuilt whole, versioned, override and drop rules recorded; pagination of views."""

from __future__ import annotations

import pytest

from consumers import Catalog
from gateway.errors import StaleCursor
from gateway.identity import LOCAL
from gateway.registry._availability import AvailabilityContext
from gateway.registry._catalog import UpstreamSnapshot, build_upstream_sources
from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor, ToolSource, build_registry
from gateway.registry._views import build_view, paginate
from gateway.runtime._loading import parse_config
from policy import Pipeline


def tool(name: str, owner: OwnerRef) -> ToolDescriptor:
    return ToolDescriptor(name, "", {"type": "object"}, owner, executor=ExecutorRef(owner.kind, owner.id, name))


def test_plugin_overrides_core_and_first_plugin_wins() -> None:
    core = ToolSource("core", "core", [tool("status", OwnerRef("core"))])
    p1 = ToolSource("plugin", "p1", [tool("status", OwnerRef("plugin", "p1")), tool("x", OwnerRef("plugin", "p1"))])
    p2 = ToolSource("plugin", "p2", [tool("x", OwnerRef("plugin", "p2"))])
    registry = build_registry(7, [core, p1, p2], AvailabilityContext())
    assert registry.version == 7
    assert registry.tools["status"].owner == OwnerRef("plugin", "p1")
    assert registry.tools["x"].owner == OwnerRef("plugin", "p1")
    assert [(d.kind, d.name) for d in registry.diagnostics] == [("override", "status"), ("drop", "x")]


def test_registry_is_immutable() -> None:
    registry = build_registry(1, [], AvailabilityContext())
    with pytest.raises(AttributeError):
        registry.version = 2  # type: ignore[misc]


CONFIG = parse_config("""
upstreams:
  alpha: {command: x}
  beta: {command: y, tools: {include: ["keep*"], exclude: ["*secret*"]}}
""")


def catalog(*names: str) -> Catalog:
    return Catalog(tools=tuple({"name": n, "inputSchema": {"type": "object"}, "icons": [{"src": "i"}]} for n in names),
                   capabilities={"tools": {}})


def test_upstream_tools_are_named_filtered_and_hidden_when_their_upstream_is_down() -> None:
    built = build_upstream_sources(CONFIG, {
        "alpha": UpstreamSnapshot(catalog("echo"), "down", "connection refused"),
        "beta": UpstreamSnapshot(catalog("keep_a", "keep_secret", "drop"), "ready"),
    })
    registry = build_registry(1, built.sources, built.context)
    assert sorted(registry.tools) == ["alpha__echo", "beta__keep_a"]
    view = build_view(registry, LOCAL, Pipeline(CONFIG.policy, {}))
    assert list(view.tools) == ["beta__keep_a"]
    [hidden] = view.plan.hidden
    assert hidden.descriptor.name == "alpha__echo"
    assert hidden.diagnostics[0].reason == "context-mismatch"
    assert hidden.diagnostics[0].signal == {"kind": "context", "key": "upstream:alpha", "equals": "ready"}
    # the wire form keeps everything the upstream sent, with only the name replaced
    assert view.tools_wire == ({"name": "beta__keep_a", "inputSchema": {"type": "object"}, "icons": [{"src": "i"}]},)


def test_paging_and_cursors() -> None:
    items = [{"name": str(i)} for i in range(5)]
    first = paginate(items, "tools", None, 2)
    assert [t["name"] for t in first["tools"]] == ["0", "1"]
    second = paginate(items, "tools", first["nextCursor"], 2)
    third = paginate(items, "tools", second["nextCursor"], 2)
    assert [t["name"] for t in third["tools"]] == ["4"] and "nextCursor" not in third
    # the caller's list changed: the page resumes after the last item delivered (tests/test_stable_cursors.py)
    assert [t["name"] for t in paginate(items[1:], "tools", first["nextCursor"], 2)["tools"]] == ["2", "3"]
    with pytest.raises(StaleCursor, match="stale cursor"):
        paginate(items[2:], "tools", first["nextCursor"], 2)
    with pytest.raises(StaleCursor, match="invalid cursor"):
        paginate(items, "tools", "garbage!", 2)
