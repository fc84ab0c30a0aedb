"""The default ranker's parts, each over the class of input it is for: plural acronyms, function words,
identifiers kept whole, argument values in a query, the upstream's name as a weak field, titles in annotations,
the vocabulary gap, queries of several steps, and the embeddings' model read from the installed package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor
from gateway.search._ranker import Bm25Ranker, RankedIndex, document_for, load_ranker
from gateway.search._tokens import STOP_WORDS, words

ACRONYMS = ("PR", "ID", "URL", "API", "ARN", "VM", "DB", "SSH", "CPU", "PDF")


def tool(name: str, description: str, upstream: str = "up", title: str | None = None,
         annotations: dict[str, Any] | None = None) -> ToolDescriptor:
    return ToolDescriptor(f"{upstream}__{name}", description, {"type": "object", "properties": {}},
                          OwnerRef("mcp", upstream), title=title, annotations=annotations,
                          executor=ExecutorRef("mcp", upstream, name))


def ranked(index: RankedIndex, tools: Sequence[ToolDescriptor], query: str, limit: int = 3) -> list[str]:
    return [tools[i].name for i, _ in index.rank(query, limit)]


@pytest.fixture(scope="module")
def hybrid() -> Any:
    return load_ranker("hybrid")


@pytest.mark.parametrize("acronym", ACRONYMS)
def test_a_plural_acronym_is_the_acronym(acronym: str) -> None:
    assert words(f"list my {acronym}s").split()[-1] == acronym
    tools = [tool(f"list_{acronym.lower()}", f"List every {acronym}."), tool("list_rows", "List the rows.")]
    assert ranked(Bm25Ranker().index([document_for(t) for t in tools]), tools, f"my open {acronym}s")[:1] == \
        [f"up__list_{acronym.lower()}"]


def test_a_query_of_function_words_alone_finds_nothing() -> None:
    tools = [tool("talk", " ".join(sorted(STOP_WORDS))), tool("other", "Something else entirely.")]
    index = Bm25Ranker().index([document_for(t) for t in tools])
    for word in sorted(STOP_WORDS):
        assert index.rank(f"{word} {word.upper()}", 5) == [], word


@pytest.mark.parametrize("identifier", ["git_status", "get-file-info", "listAllowedDirectories"])
def test_an_identifier_in_the_query_finds_the_tool_of_that_name_first(identifier: str) -> None:
    split = words(identifier).lower()
    tools = [tool("describe", f"Explains {split} and more {split} in detail, {split}."), tool(identifier, "Does it.")]
    assert ranked(Bm25Ranker().index([document_for(t) for t in tools]), tools, f"run {identifier}")[0] == \
        f"up__{identifier}"


@pytest.mark.parametrize("value", ["session:8812", "https://example.com/session/8812", "/var/session/8812",
                                   "arn:aws:iam::123456789012:session/8812", '"session 8812"', "SESSION-8812"])
def test_argument_values_weigh_less_than_the_words_of_the_task(value: str) -> None:
    tools = [tool("get_session", "Get a session."), tool("expire", "Set a timeout on a key.")]
    assert ranked(Bm25Ranker().index([document_for(t) for t in tools]), tools, f"expire {value}")[0] == "up__expire"


@pytest.mark.parametrize("upstream", ["aws-documentation", "docs", "document-store"])
def test_the_upstreams_name_weighs_less_than_the_tools_own_words(upstream: str) -> None:
    tools = [tool(f"t{i}", f"Tool number {i}.", upstream=upstream) for i in range(5)]
    tools.append(tool("read_document", "Read a document.", upstream="files"))
    index = Bm25Ranker().index([document_for(t) for t in tools])
    assert ranked(index, tools, "read the document")[0] == "files__read_document"


@pytest.mark.parametrize("where", ["title", "annotations"])
def test_a_title_is_searched_from_either_place(where: str) -> None:
    place: dict[str, Any] = {"title": "Hand over to a teammate"} if where == "title" else \
        {"annotations": {"title": "Hand over to a teammate", "readOnlyHint": False}}
    tools = [tool("assign", "Sets the assignee.", **place), tool("other", "Something else.")]
    assert document_for(tools[0]).title == "Hand over to a teammate"
    assert ranked(Bm25Ranker().index([document_for(t) for t in tools]), tools, "teammate")[:1] == ["up__assign"]


GAPS = [  # (query, the tool that does it, a tool with the query's other word): BM25F alone ranks the second first
    ("go back to the previous deployment", "rollback_deployment", "Rollback a deployment to an earlier revision.",
     "list_deployments", "List the deployments."),
    ("remove the user bob", "delete_user", "Delete a user.", "get_user", "Get a user."),
    ("rename the channel", "update_channel", "Update a channel's name or topic.", "list_channels",
     "List the channels."),
]
"""Static embeddings bridge some gaps, not all: "open a ticket" is as far from "create an issue" as from any tool
(cosine 0.00), and "reply" still loses to the word "issue" in a name (the report of issue 33 lists such misses)."""


@pytest.mark.parametrize(("query", "name", "description", "decoy", "decoy_description"), GAPS)
def test_the_embeddings_bridge_a_vocabulary_gap(hybrid: Any, query: str, name: str, description: str, decoy: str,
                                                 decoy_description: str) -> None:
    tools = [tool(decoy, decoy_description), tool(name, description),
             *(tool(f"filler_{i}", f"Unrelated filler number {i}.") for i in range(20))]
    documents = [document_for(t) for t in tools]
    assert ranked(Bm25Ranker().index(documents), tools, query)[0] == f"up__{decoy}", "words alone miss it"
    assert ranked(hybrid.index(documents), tools, query)[0] == f"up__{name}"


@pytest.mark.parametrize("query", ["list the apps and sync the ones that drifted",
                                   "list the apps, then sync the drifted ones",
                                   "list the apps; sync the ones that drifted"])
def test_a_query_of_several_steps_finds_a_tool_for_each(hybrid: Any, query: str) -> None:
    tools = [tool("list_apps", "List the applications."), tool("sync_app", "Sync an application with its source."),
             tool("create_app", "Create an application."), tool("update_app", "Update an application."),
             tool("delete_app", "Delete an application."), tool("get_app", "Get one application.")]
    top = ranked(hybrid.index([document_for(t) for t in tools]), tools, query, limit=3)
    assert {"up__list_apps", "up__sync_app"} <= set(top), top


def test_the_embedding_model_is_read_from_the_installed_package_without_network(monkeypatch: Any) -> None:
    import socket

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    ranker = load_ranker("hybrid")
    tools = [tool("take_screenshot", "Capture the page as an image."), tool("other", "Something else.")]
    assert ranked(ranker.index([document_for(t) for t in tools]), tools, "screenshot of the page")[0] == \
        "up__take_screenshot"
