"""The fake model's answers (tests/fake_wire.py), in every API and both shapes, read by the
gateway proxy's own reader (runner/gateway/wire.py) as the usage and tool calls they
report: what tests/test_installed_e2e.py compares the records with is what was served."""

from __future__ import annotations

from typing import Any

import pytest

from runner.gateway import wire as gateway_wire
from tests.fake_wire import JSON, RENDERERS, SSE, Api, Call, Reply, Usage


@pytest.fixture(scope="module")
def wire() -> Any:
    return gateway_wire


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", list(RENDERERS))
def test_the_fake_speaks_what_the_gateway_reads(wire: Any, api: Api, streamed: bool) -> None:
    usage = Usage(1234, 56, cache_read=200, cache_write=30 if api == "anthropic" else 0)
    reply = Reply("Working.", (Call("Bash", {"command": "ls"}), Call("Read", {})), usage)
    read = wire.read_answer(RENDERERS[api](reply, "m-1", streamed), SSE if streamed else JSON)
    assert read.model == "m-1" and read.tool_calls == ["Bash", "Read"]
    assert (read.prompt_tokens, read.completion_tokens) == (usage.prompt, usage.completion)
    assert (read.cache_read_tokens, read.cache_write_tokens) == (
        usage.cache_read,
        usage.cache_write,
    )


def test_text_alone_is_an_answer_without_tool_calls(wire: Any) -> None:
    for api, render in RENDERERS.items():
        for streamed in (False, True):
            body = render(Reply("Done.", usage=Usage(10, 2)), "m-1", streamed)
            read = wire.read_answer(body, SSE if streamed else JSON)
            assert read.tool_calls == [] and read.completion_tokens == 2, api
