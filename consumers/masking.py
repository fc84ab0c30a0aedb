"""The one masking of configured secrets: every value a config was given as a secret is replaced wherever text
from an upstream or from the config is shown (an upstream's stderr and reason, `/readyz`, the log, `triad plan`,
`explain` and `check`, errors relayed to clients, the console).

A secret is every `${VAR}` value interpolated into the config (shown as `${VAR}`, so a message stays readable), and
every value of a secret field whatever its spelling (`SecretStr` fields: env, headers, tokens, OAuth client
secrets, the cluster key; the password and query values of a URL), shown as `***`. `gateway.config.TriadConfig`
builds the mask of a whole config (`secret_mask()`); `SecretMask.of_fields` collects the fields of any model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, quote, urlsplit

from pydantic import BaseModel, SecretStr

HIDDEN = "***"
"""What a secret value without a variable's name is shown as."""
MIN_BARE_SECRET = 4
"""Shorter values are hidden only where a message quotes them: a bare `1` or `on` would otherwise turn `line 12`
into `line ${VAR}2`."""


class SecretMask:
    """Replaces each secret value (longest first, so a value that contains another is hidden whole) by its label;
    also the value's URL-encoded and JSON-escaped spellings, the ways a child or a server quotes it."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        spelled: dict[str, str] = {}
        for value, label in (labels or {}).items():
            if value:
                for form in (value, quote(value, safe=""), json.dumps(value)[1:-1]):
                    spelled.setdefault(form, label)
        self._labels = sorted(spelled.items(), key=lambda item: -len(item[0]))

    def __call__(self, text: str) -> str:
        for value, label in self._labels:
            if value not in text:
                continue
            for quoted in (repr(value), f'"{value}"', f"'{value}'"):
                text = text.replace(quoted, f"'{label}'")
            if len(value) >= MIN_BARE_SECRET:
                text = text.replace(value, label)
        return text

    def json(self, value: object) -> object:
        """A JSON value with every string in it (keys included) masked."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.json(item) for item in value]
        if isinstance(value, dict):
            return {self(key) if isinstance(key, str) else key: self.json(item) for key, item in value.items()}
        return value

    def __bool__(self) -> bool:
        return bool(self._labels)

    def with_values(self, values: Iterable[str], label: str = HIDDEN) -> SecretMask:
        """This mask, plus `values` (those it already hides keep their label)."""
        merged = {value: label for value in values if value}
        merged.update({value: known for value, known in self._labels})
        return SecretMask(merged)

    @staticmethod
    def of_fields(model: BaseModel) -> list[str]:
        """Every secret value of `model` at any depth: its `SecretStr` fields, and the password and query values
        of its fields named `url` or `redis` (where a token is often written into the address)."""
        found: list[str] = []
        _collect(model, found)
        return found


def url_secrets(url: str) -> list[str]:
    """The password and the query values of a URL (where tokens hide)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    return [*([password] if password else []), *(value for _key, value in parse_qsl(parts.query) if value)]


def _collect(value: object, found: list[str], key: str = "") -> None:
    if isinstance(value, SecretStr):
        found.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _collect(getattr(value, name), found, name)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found, key)
    elif isinstance(value, tuple | list):
        for item in value:
            _collect(item, found, key)
    elif isinstance(value, str) and key in ("url", "redis"):
        found.extend(url_secrets(value))
