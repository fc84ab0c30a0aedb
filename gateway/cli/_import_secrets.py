"""Secrets found by `triad import`: literal credentials in a client's file become `${VAR}` references.

A value is taken for a secret by its name (an env variable, header, query parameter or `--flag` that says token,
key, secret, password, auth, cookie...) or by its shape (`sk-...`, `ghp_...`, `xoxb-...`, a long random-looking
string). Values that already hold a `${...}` reference stay as they are. `variables` maps every variable the
result reads to where its value came from, so the user can be told what to set.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_NAME = re.compile(r"(?i)(token|secret|passw|api[-_]?key|apikey|(^|[-_])key$|^key|auth|credential|cookie|"
                         r"private|session|bearer|pat$)")
SECRET_SHAPE = re.compile(r"^(sk-|sk_|rk_|pk_live|ghp_|gho_|ghu_|ghs_|github_pat_|glpat-|xox[abposr]-|AKIA|AIza|"
                          r"hf_|npm_|pypi-|eyJ)[A-Za-z0-9._\-]{8,}|^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-+/=]{32,}$")
"""Well-known credential prefixes, or 32+ characters of letters and digits (a hex or base64 key)."""
_SCHEME = re.compile(r"^(?P<scheme>Bearer|Basic|Token|Bot|ApiKey)\s+(?P<value>.+)$", re.IGNORECASE)


class Secrets:
    def __init__(self) -> None:
        self.variables: dict[str, str] = {}
        self.replaced: list[str] = []
        """Where a literal secret was replaced (`server.env.NAME`), for the report."""
        self._values: dict[str, str] = {}

    def env(self, server: str, env: dict[str, str]) -> dict[str, str]:
        return {key: self._hide(value, key, f"{server}.env.{key}", key, SECRET_NAME.search(key) is not None)
                for key, value in env.items()}

    def headers(self, server: str, headers: dict[str, str]) -> dict[str, str]:
        out = {}
        for key, value in headers.items():
            variable = _variable(server, key)
            by_name = SECRET_NAME.search(key) is not None or key.lower() in ("authorization", "proxy-authorization")
            if (match := _SCHEME.match(value)) and "${" not in match["value"]:
                out[key] = f"{match['scheme']} " + self._hide(match["value"], variable, f"{server}.headers.{key}",
                                                               key, True)
            else:
                out[key] = self._hide(value, variable, f"{server}.headers.{key}", key, by_name)
        return out

    def url(self, server: str, url: str) -> str:
        parts = urlsplit(url)
        if not parts.query:
            return url
        query = [(key, self._hide(value, _variable(server, key), f"{server}.url?{key}", key,
                                  SECRET_NAME.search(key) is not None))
                 for key, value in parse_qsl(parts.query, keep_blank_values=True)]
        return urlunsplit(parts._replace(query=urlencode(query, safe="${}:-")))

    def args(self, server: str, args: list[str]) -> list[str]:
        out: list[str] = []
        flag_secret: str | None = None  # the name of a `--token` flag whose value comes next
        for index, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if arg.startswith("-") and eq and SECRET_NAME.search(flag.lstrip("-")):
                name = flag.lstrip("-")
                out.append(f"{flag}=" + self._hide(value, _variable(server, name), f"{server}.args[{index}]", name,
                                                   True))
            elif flag_secret is not None:
                out.append(self._hide(arg, _variable(server, flag_secret), f"{server}.args[{index}]", flag_secret,
                                      True))
            else:
                out.append(self._hide(arg, _variable(server, f"arg_{index}"), f"{server}.args[{index}]", "", False))
            flag_secret = arg.lstrip("-") if arg.startswith("-") and not eq and SECRET_NAME.search(arg) else None
        return out

    def _hide(self, value: str, variable: str, where: str, name: str, by_name: bool) -> str:
        if "${" in value or not value or not (by_name or SECRET_SHAPE.search(value)):
            return value
        variable = self._free(variable, value, where)
        self.replaced.append(where)
        return "${" + variable + "}"

    def _free(self, variable: str, value: str, where: str) -> str:
        """`variable`, or `variable_2`... when another value took it (the same value shares its variable)."""
        variable = re.sub(r"[^A-Za-z0-9_]", "_", variable).upper().strip("_") or "SECRET"
        candidate, n = variable, 1
        while candidate in self._values and self._values[candidate] != value:
            n += 1
            candidate = f"{variable}_{n}"
        self._values[candidate] = value
        self.variables.setdefault(candidate, f"{where} (a secret; its value is not copied)")
        return candidate


def _variable(server: str, name: str) -> str:
    return f"{server}_{name}"
