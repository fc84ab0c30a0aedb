"""Words a tool or a query is found by: identifiers split and kept whole, plural acronyms singular, argument
values in a query told apart from its words, function words dropped, the rest stemmed (Snowball, English).

Plain functions of their text (the stemmer is passed in: one per ranker, it is not thread-safe to share).
"""

from __future__ import annotations

import re
from collections.abc import Callable

STOP_WORDS = frozenset(re.findall(r"\w+", """
a about after again all also am an and any are as at be been before being both but by can could did do does
doing done for from had has have having he her here hers him his how i if in into is it its itself just let
lets me might mine more most much must my myself need needs no nor not now of off on once only or other our
ours out over own please s same she should so some such than that the their theirs them then there these they
this those though through to too under until up us very via want wants was we were what whats when where which
while who whom whose why will with would you your yours yourself
"""))
"""Function words, in the query and in tools' text alike ('which', 'do', 'me', 'my' ranked tools before: issue 33).
Verbs that name an action (`get`, `list`, `show`, `make`) are not here: tools are told apart by them."""

_PLURAL_ACRONYM = re.compile(r"\b([A-Z]{2,})s\b")
_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_UPPER_WORD = re.compile(r"([A-Z])([A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-./:]+")
_TOKEN = re.compile(r"[A-Z]{2,}(?=s\b)|[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+[a-z]*")
"""A word as `words` splits them (camel case, separators, a plural acronym's `s` left alone), found directly."""
_CHUNK = re.compile(r"\S+")
_IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:[_\-][A-Za-z0-9]+)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
"""`get_file_info`, `git-status`, `listAllowedDirectories`: one token whole, besides its words."""
_VALUE = re.compile(r"\w*\d\w*[:/.@#\-]\S*|\S*[:/.@#\-]\w*\d\S*|\S*://\S*|\S+@\S+\.\S+|\d+\w*|arn:\S*")
"""A chunk of a query that is an argument value (ids, keys, paths, URLs, ARNs, numbers), not words about the
task: `53871023`, `ENG-90`, `session:8812`, `A1:C100`, `arn:aws:iam::1:role/x`. Its words match tools by accident."""
_FILE = re.compile(r"^[\w\-]+\.([A-Za-z]{2,5})$")


def words(text: str) -> str:
    """Identifiers split into words: `get_file_info` -> `get file info`, `listAllowedDirectories` -> `list Allowed
    Directories`, `API-post-search` -> `API post search`; a plural acronym loses its `s` (`PRs` -> `PR`)."""
    split = _SEPARATORS.sub(" ", _PLURAL_ACRONYM.sub(r"\1", text))
    return _UPPER_WORD.sub(r"\1 \2", _LOWER_UPPER.sub(r"\1 \2", split))


def _plain(text: str, stem: Callable[[list[str]], list[str]]) -> list[str]:
    """The words of `words(text)`, lowercased, less function words, stemmed; in one pass of one pattern."""
    return stem([w for w in (m.lower() for m in _TOKEN.findall(text)) if w not in STOP_WORDS])


def tokens(text: str, stem: Callable[[list[str]], list[str]], whole: bool = False) -> list[str]:
    """A tool field's tokens: its words stemmed and, with `whole` (for names), each identifier whole as well."""
    return _plain(text, stem) + [m.lower() for m in _IDENTIFIER.findall(text)] if whole else _plain(text, stem)


def query_tokens(text: str, stem: Callable[[list[str]], list[str]]) -> tuple[list[str], list[str]]:
    """(the query's words, the words of its argument values). A value keeps only a file name's extension (a
    `.xlsx` says which tool); quoted text is a value too (`a row "Launch webinar"`)."""
    found, values = [], []
    for quoted, plain in re.findall(r'"([^"]*)"|([^"]+)', text):
        if quoted:
            values += _plain(quoted, stem)
            continue
        for chunk in _CHUNK.findall(plain):
            chunk = chunk.strip(",;()[]{}'?!")
            if _FILE.match(chunk):
                found += _plain(_FILE.match(chunk).group(1), stem)  # type: ignore[union-attr]
            elif _VALUE.fullmatch(chunk):
                values += _plain(chunk, stem)
            else:
                found += _plain(chunk, stem) + [m.lower() for m in _IDENTIFIER.findall(chunk)]
    return found, values
