"""Secrets found by `triad import`: literal credentials in a client's file become `${VAR}` references.

A value is taken for a secret by its name (an env variable, header, query parameter, `--flag` or `KEY=` argument
that says token, key, secret, password, auth, cookie...), by its place (the value of a `--header "Name: value"`
argument is a header; the password of a `scheme://user:pass@host` URL or DSN, in an argument or an env value) or
by its shape (`sk-...`, `ghp_...`, `xoxb-...`, a long random-looking string). Values that already hold a `${...}`
reference stay as they are. `variables` maps every variable the result reads to where its value came from, so the
user can be told what to set.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_NAME = re.compile(r"(?i)(token|secret|passw|api[-_]?key|apikey|(^|[-_])key$|^key|auth|credential|cookie|"
                         r"private|session|bearer|pat$)")
SECRET_SHAPE = re.compile(r"^(sk-|sk_|rk_|pk_live|ghp_|gho_|ghu_|ghs_|github_pat_|glpat-|xox[abposr]-|AKIA|AIza|"
                          r"hf_|npm_|pypi-|eyJ)[A-Za-z0-9._\-]{8,}|^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-+/=]{32,}$")
"""Well-known credential prefixes, or 32+ characters of letters and digits (a hex or base64 key)."""
HEADER_FLAGS = frozenset({"--header", "-H", "--headers"})
"""Flags whose value is an HTTP header, `Name: value` (mcp-remote, supergateway, curl-like wrappers)."""
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#@:\s]*:)(?P<password>[^/?#@\s]+)(?P<tail>@.*)$")
"""`scheme://user:password@host...`: a DSN (postgres, mysql, redis, amqp...) or a URL with basic credentials."""
_ASSIGNMENT = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)
_SCHEME = re.compile(r"^(?P<scheme>Bearer|Basic|Token|Bot|ApiKey)\s+(?P<value>.+)$", re.IGNORECASE)


class Secrets:
    def __init__(self) -> None:
        self.variables: dict[str, str] = {}
        self.replaced: list[str] = []
        """Where a literal secret was replaced (`server.env.NAME`), for the report."""
        self._values: dict[str, str] = {}

    def env(self, server: str, env: dict[str, str]) -> dict[str, str]:
        out = {}
        for key, value in env.items():
            hidden = self._hide(value, key, f"{server}.env.{key}", key, SECRET_NAME.search(key) is not None)
            out[key] = self._in_text(hidden, key, f"{server}.env.{key}") if hidden == value else hidden
        return out

    def headers(self, server: str, headers: dict[str, str]) -> dict[str, str]:
        return {key: self._header(server, key, value, f"{server}.headers.{key}") for key, value in headers.items()}

    def url(self, server: str, url: str, where: str | None = None) -> str:
        """A URL's password (`postgres://user:pass@...`) and secret query parameters (`?api_key=`) as variables."""
        where = where or f"{server}.url"
        if (match := _USERINFO.match(url)) and "${" not in match["password"]:
            variable = self._hide(match["password"], _variable(server, "password"), f"{where} (password)",
                                  "password", True)
            url = match["head"] + variable + match["tail"]
        parts = urlsplit(url)
        if not parts.query:
            return url
        query = [(key, self._hide(value, _variable(server, key), f"{where}?{key}", key,
                                  SECRET_NAME.search(key) is not None))
                 for key, value in parse_qsl(parts.query, keep_blank_values=True)]
        return urlunsplit(parts._replace(query=urlencode(query, safe="${}:-")))

    def args(self, server: str, args: list[str]) -> list[str]:
        """`--token X`, `--token=X`, `--header "Authorization: Bearer X"` (mcp-remote), `KEY=X` (docker's `-e`),
        URLs with a password or a secret query parameter, and values shaped like a key."""
        out: list[str] = []
        pending: str | None = None  # the flag whose value comes next: a header flag or a secret-named one
        for index, arg in enumerate(args):
            where = f"{server}.args[{index}]"
            flag, eq, value = arg.partition("=")
            assignment = _ASSIGNMENT.match(arg)
            if pending in HEADER_FLAGS:
                out.append(self._header_arg(server, arg, where))
            elif pending is not None:
                out.append(self._hide(arg, _variable(server, pending), where, pending, True))
            elif arg.startswith("-") and eq and flag in HEADER_FLAGS:
                out.append(f"{flag}=" + self._header_arg(server, value, where))
            elif arg.startswith("-") and eq:
                name = flag.lstrip("-")
                if SECRET_NAME.search(name):
                    out.append(f"{flag}=" + self._hide(value, _variable(server, name), where, name, True))
                else:
                    out.append(f"{flag}=" + self._in_text(value, _variable(server, name), where))
            elif assignment and not arg.startswith("-"):  # `KEY=value`, as after docker's -e or env(1)
                key = assignment["key"]
                hidden = self._hide(assignment["value"], key, where, key, SECRET_NAME.search(key) is not None)
                if hidden == assignment["value"]:
                    hidden = self._in_text(hidden, key, where)
                out.append(f"{key}={hidden}")
            else:
                out.append(self._in_text(arg, _variable(server, f"arg_{index}"), where, server))
            named = arg.startswith("-") and not eq
            pending = arg if named and arg in HEADER_FLAGS else (
                arg.lstrip("-") if named and SECRET_NAME.search(arg.lstrip("-")) else None)
        return out

    def _header(self, server: str, key: str, value: str, where: str) -> str:
        variable = _variable(server, key)
        by_name = SECRET_NAME.search(key) is not None or key.lower() in ("authorization", "proxy-authorization")
        if (match := _SCHEME.match(value)) and "${" not in match["value"]:
            return f"{match['scheme']} " + self._hide(match["value"], variable, where, key, True)
        return self._hide(value, variable, where, key, by_name)

    def _header_arg(self, server: str, text: str, where: str) -> str:
        """`Name: value` as a command-line argument (mcp-remote's `--header`), the value hidden as a header's."""
        name, colon, value = text.partition(":")
        if not colon or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name.strip()):
            return self._in_text(text, _variable(server, "header"), where)
        space = value[: len(value) - len(value.lstrip())]
        return f"{name}:{space}" + self._header(server, name.strip(), value.strip(), where)

    def _in_text(self, value: str, variable: str, where: str, base: str | None = None) -> str:
        """A value not named as a secret: a URL's password and query (variables named after `base`, else
        `variable`), else the value as `variable` if it is shaped like a key."""
        if "://" in value:
            return self.url(base or variable, value, where)
        return self._hide(value, variable, where, "", False)

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
