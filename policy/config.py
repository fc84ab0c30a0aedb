"""The policy's configuration (`policy:` in the YAML, and each client's `tools:` rule): the seven layers' rules.

These models belong to the policy; `gateway.config` assembles them into the whole file's model and validates it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolRule(_Model):
    """One policy layer's rule: `*` globs, exact names, `group:<name>`. An absent or empty allow allows all."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    also_allow: tuple[str, ...] = ()


class PolicyConfig(_Model):
    profile: ToolRule | None = None
    profiles: dict[str, ToolRule] = {}
    use: str | None = None
    agents: dict[str, ToolRule] = {}
    providers: dict[str, ToolRule] = {}
    groups: dict[str, ToolRule] = {}
    gateway_deny: tuple[str, ...] = ()
    gateway_allow: tuple[str, ...] = ()
    """Names lifted from the built-in deny list that applies when listening on a non-loopback address."""
    owner_only: tuple[str, ...] = ()
    tool_groups: dict[str, tuple[str, ...]] = {}
    provider_map: dict[str, str] = {}
    """clientInfo.name -> provider, for clients whose config does not fix `provider` (added to the defaults)."""

    @model_validator(mode="after")
    def _check_profile(self) -> PolicyConfig:
        if self.use is not None:
            if self.profile is not None:
                raise ValueError("use either profile or use (a named profile), not both")
            if self.use not in self.profiles:
                known = ", ".join(self.profiles) or "none"
                raise ValueError(f"use: no profile named {self.use!r} under policy.profiles (profiles: {known})")
        return self

    def active_profile(self) -> ToolRule | None:
        return self.profiles[self.use] if self.use is not None else self.profile
