"""A small real MCP server that ships with Triad, so `make run` works on a fresh machine without the network.

Tools `echo`, `add` and `word_count`, a resource `demo://readme`, a template `demo://notes/{topic}`, and a
prompt `summarize`. Runs over stdio by default; `--http PORT` serves streamable HTTP on 127.0.0.1 instead.
Shipped in the wheel: `python -m gateway.starter.demo_upstream` (what the example and starter config run).
"""

from __future__ import annotations

import argparse

from mcp.server import MCPServer

demo = MCPServer("triad-demo", instructions="A demo upstream for Triad.")


@demo.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


@demo.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@demo.tool(description="Count the words in a text.")
def word_count(text: str) -> dict[str, int]:
    return {"words": len(text.split())}


@demo.resource("demo://readme", description="What this demo upstream offers.", mime_type="text/plain")
def readme() -> str:
    return "The Triad demo upstream: tools echo, add, word_count; a prompt summarize."


@demo.resource("demo://notes/{topic}", description="A note about a topic.", mime_type="text/plain")
def note(topic: str) -> str:
    return f"Notes about {topic}."


@demo.prompt(description="Ask for a summary of a text.")
def summarize(text: str) -> str:
    return f"Summarize this in one sentence:\n\n{text}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.http is not None:
        demo.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        demo.run()


if __name__ == "__main__":
    main()
