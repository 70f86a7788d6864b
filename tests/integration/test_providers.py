"""The openai and anthropic providers against a real HTTP server on loopback
that speaks their wire formats, with recorded answers, slow answers, rate
limits, server errors and context-length refusals."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest
import trio

from daemon.config import AnthropicConfig, Config, OpenAIConfig, Secret, load_config
from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.extraction.document import Document, grid_page, grid_text_line
from daemon.extraction.pipeline import extract
from daemon.extraction.providers import llm
from daemon.extraction.providers import openai as openai_module
from daemon.extraction.providers.anthropic import AnthropicProvider
from daemon.extraction.providers.openai import OpenAIProvider
from daemon.jobs import filetypes
from daemon.services import Services

KEY = "sk-test-0123456789-very-secret"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "total": {"type": "number"},
        "date": {"type": "string", "format": "date"},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "amount": {"type": "number"}}}},
    },
    "required": ["invoice_number", "total"],
}
TEXT = "ACME Ltd\nInvoice No:   INV-7\nDate:  12/03/2024\nWidget   10.00\nTotal Due:   $ 12.50\n"
ANSWER = {"invoice_number": "INV-7", "total": 12.5, "date": "2024-03-12", "items": [{"description": "Widget",
                                                                                     "amount": 10.0}]}


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drip_s: float = 0.0  # sends the body a byte at a time, this far apart


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeServer:
    """An HTTP/1.1 server (h11 over trio) answering from a script or a function."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.respond: Callable[[Recorded], Reply] | None = None
        self.requests: list[Recorded] = []
        self.connections = 0  # TCP connections accepted
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        while True:
            request: h11.Request | None = None
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        return  # the client reset the connection (it left an answer unread)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            assert request is not None
            recorded = Recorded(
                request.method.decode(), request.target.decode(),
                {k.decode().lower(): v.decode() for k, v in request.headers},
                json.loads(body) if body else None,
            )
            self.requests.append(recorded)
            reply = self.respond(recorded) if self.respond else self.replies.pop(0)
            if reply.delay_s:
                await trio.sleep(reply.delay_s)
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            headers = [("content-type", "application/json"), ("content-length", str(len(payload))),
                       *reply.headers.items()]
            try:
                await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)))
                for piece in ([payload[i:i + 1] for i in range(len(payload))] if reply.drip_s else [payload]):
                    await stream.send_all(conn.send(h11.Data(data=piece)))
                    await trio.sleep(reply.drip_s)
                await stream.send_all(conn.send(h11.EndOfMessage()))
            except trio.BrokenResourceError:
                return
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, fake.handle, 0, host="127.0.0.1"))
        fake.port = listeners[0].socket.getsockname()[1]
        yield fake
        nursery.cancel_scope.cancel()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.fixture(autouse=True)
def _fresh_capabilities() -> None:
    openai_module._NO_JSON_SCHEMA.clear()


def document(text: str = TEXT) -> Document:
    lines = [line for row, raw in enumerate(text.splitlines()) if (line := grid_text_line(row, raw))]
    return Document((grid_page(1, lines),))


def openai_config(server: FakeServer, timeout_ms: int = 5000) -> OpenAIConfig:
    return OpenAIConfig(base_url=f"{server.url}/v1", model="test-model", api_key=Secret(KEY), timeout_ms=timeout_ms)


def anthropic_config(server: FakeServer, timeout_ms: int = 5000) -> AnthropicConfig:
    return AnthropicConfig(base_url=server.url, model="claude-test", api_key=Secret(KEY), timeout_ms=timeout_ms)


def chat(content: str, prompt_tokens: int = 100, completion_tokens: int = 20) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def tool_use(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Here it is."},
                    {"type": "tool_use", "id": "toolu_1", "name": "record_extraction", "input": result}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 321, "output_tokens": 54},
    }


# --- openai ---------------------------------------------------------------------------

async def test_openai_structured_output_request_and_result(server: FakeServer, client: httpx.AsyncClient) -> None:
    server.replies.append(Reply(body=chat(json.dumps({**ANSWER, "date": None}))))
    output = await OpenAIProvider(openai_config(server)).extract(document(), SCHEMA, client)
    assert output.result == {k: v for k, v in ANSWER.items() if k != "date"}  # null means "not stated"
    assert output.model == "test-model"
    assert output.usage == {"requests": 1, "inputTokens": 100, "outputTokens": 20}
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.body
    assert body["model"] == "test-model" and body["temperature"] == 0
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    strict = response_format["json_schema"]
    assert strict["strict"] is True
    assert strict["schema"]["additionalProperties"] is False
    assert set(strict["schema"]["required"]) == set(SCHEMA["properties"])
    assert strict["schema"]["properties"]["date"]["type"] == ["string", "null"]
    # A required value may be null too: a model that must answer invents what the document lacks.
    assert strict["schema"]["properties"]["total"]["type"] == ["number", "null"]
    assert strict["schema"]["properties"]["items"]["items"]["properties"]["amount"]["type"] == ["number", "null"]
    assert "INV-7" in body["messages"][-1]["content"]
    assert "--- page 1 ---" in body["messages"][-1]["content"]


async def test_openai_server_without_json_schema_falls_back_to_json_mode_and_validates(
    server: FakeServer, client: httpx.AsyncClient
) -> None:
    server.replies += [
        Reply(400, {"error": {"message": "response_format type json_schema is not supported by this server"}}),
        Reply(body=chat("```json\n{\"total\": \"12.50\"}\n```")),  # invalid: no invoice_number, total a string
        Reply(body=chat(json.dumps(ANSWER))),
        Reply(body=chat(json.dumps(ANSWER))),
    ]
    provider = OpenAIProvider(openai_config(server))
    output = await provider.extract(document(), SCHEMA, client)
    assert output.result == ANSWER
    assert [r.body["response_format"]["type"] for r in server.requests] == ["json_schema", "json_object",
                                                                           "json_object"]
    correction = server.requests[2].body["messages"]
    assert correction[-2]["role"] == "assistant"
    assert "does not match the schema" in correction[-1]["content"]
    assert "invoice_number" in server.requests[1].body["messages"][0]["content"]  # the schema is in the prompt
    assert output.usage is not None and output.usage["requests"] == 2
    # The server's lack of json_schema is remembered: the next document goes straight to JSON mode.
    await provider.extract(document(), SCHEMA, client)
    assert server.requests[3].body["response_format"]["type"] == "json_object"


@pytest.mark.parametrize(
    ("reply", "error", "code", "retry_after"),
    [
        (Reply(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "7"}),
         TransientJobError, "AI_PROVIDER_RATE_LIMIT", 7.0),
        (Reply(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "1500"}),
         TransientJobError, "AI_PROVIDER_RATE_LIMIT", 1.5),
        (Reply(503, {"error": {"message": "overloaded"}}, {"Retry-After": "3"}),
         TransientJobError, "AI_PROVIDER_ERROR", 3.0),
        (Reply(500, b"<html>Internal Server Error</html>"), TransientJobError, "AI_PROVIDER_ERROR", None),
        (Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
        (Reply(404, {"error": {"message": "The model `test-model` does not exist"}}),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
        (Reply(200, chat("I cannot help with that.")), PermanentJobError, "AI_PROVIDER_ERROR", None),
        # Numbers no reader of the result could carry (stored, NaN broke every later answer of the job).
        (Reply(200, chat('{"invoice_number": "INV-7", "total": NaN}')), PermanentJobError, "AI_PROVIDER_ERROR",
         None),
        (Reply(200, chat('{"invoice_number": "INV-7", "total": 1' + "0" * 400 + "}")), PermanentJobError,
         "AI_PROVIDER_ERROR", None),
        (Reply(200, chat('{"invoice_number": ' + "[" * 100_000 + "]" * 100_000 + "}")), PermanentJobError,
         "AI_PROVIDER_ERROR", None),
        (Reply(200, b'{"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": Infinity}}'),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
    ],
)
async def test_openai_errors_map_to_error_codes(
    server: FakeServer, client: httpx.AsyncClient, reply: Reply, error: type[JobError], code: str,
    retry_after: float | None,
) -> None:
    server.replies.append(reply)
    with pytest.raises(error) as caught:
        await OpenAIProvider(openai_config(server)).extract(document(), SCHEMA, client)
    assert caught.value.code == code
    assert caught.value.retry_after_s == retry_after
    assert KEY not in caught.value.message


async def test_openai_timeout_is_retryable(server: FakeServer, client: httpx.AsyncClient) -> None:
    server.replies.append(Reply(body=chat(json.dumps(ANSWER)), delay_s=2))
    with pytest.raises(TransientJobError) as caught:
        await OpenAIProvider(openai_config(server, timeout_ms=200)).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_TIMEOUT"


async def test_an_unreachable_server_is_retryable(client: httpx.AsyncClient) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        config = OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=Secret(KEY))
        with pytest.raises(TransientJobError) as caught:
            await OpenAIProvider(config).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_ERROR"


async def test_a_document_longer_than_the_context_is_split_and_merged(
    server: FakeServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm, "DEFAULT_CHUNK_CHARS", 8000)
    monkeypatch.setattr(llm, "MIN_CHUNK_CHARS", 500)
    pages = []
    for number in range(1, 5):
        rows = [f"Item {number}-{i}   {i}.00" for i in range(40)]
        head = ["Invoice No:   INV-9"] if number == 1 else []
        tail = ["Total:   999.00"] if number == 4 else []
        lines = [grid_text_line(row, text) for row, text in enumerate(head + rows + tail)]
        pages.append(grid_page(number, [line for line in lines if line is not None]))
    long_document = Document(tuple(pages))
    context_chars = 2500

    def respond(request: Recorded) -> Reply:
        prompt = request.body["messages"][-1]["content"]
        if len(prompt) > context_chars:
            return Reply(400, {"error": {"message": "This model's maximum context length is 1000 tokens",
                                         "code": "context_length_exceeded"}})
        found: dict[str, Any] = {"items": []}
        if "INV-9" in prompt:
            found["invoice_number"] = "INV-9"
        if "999.00" in prompt:
            found["total"] = 999.0
        for page in range(1, 5):
            if f"--- page {page} ---" in prompt:
                found["items"].append({"description": f"page {page}", "amount": 1.0})
        return Reply(body=chat(json.dumps(found)))

    server.respond = respond
    output = await OpenAIProvider(openai_config(server)).extract(long_document, SCHEMA, client)
    assert output.result["invoice_number"] == "INV-9"
    assert output.result["total"] == 999.0
    assert [item["description"] for item in output.result["items"]] == [f"page {n}" for n in range(1, 5)]
    sent = [r for r in server.requests if len(r.body["messages"][-1]["content"]) <= context_chars]
    assert len(sent) >= 2 and output.usage is not None and output.usage["requests"] == len(sent)
    assert len(server.requests) > len(sent)  # it learnt the context from the refusals


# --- anthropic --------------------------------------------------------------------------

async def test_anthropic_tool_use_request_and_result(server: FakeServer, client: httpx.AsyncClient) -> None:
    server.replies.append(Reply(body=tool_use(ANSWER)))
    output = await AnthropicProvider(anthropic_config(server)).extract(document(), SCHEMA, client)
    assert output.result == ANSWER
    assert output.model == "claude-test"
    assert output.usage == {"requests": 1, "inputTokens": 321, "outputTokens": 54}
    request = server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    tool = request.body["tools"][0]
    assert tool["input_schema"] == SCHEMA
    assert request.body["tool_choice"] == {"type": "tool", "name": tool["name"]}
    assert "INV-7" in request.body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("reply", "error", "code", "retry_after"),
    [
        (Reply(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "Too many"}},
               {"retry-after": "12"}), TransientJobError, "AI_PROVIDER_RATE_LIMIT", 12.0),
        (Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
         TransientJobError, "AI_PROVIDER_ERROR", None),
        (Reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool"}}),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
        (Reply(200, {"content": [{"type": "text", "text": "no tool"}], "stop_reason": "end_turn"}),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
        (Reply(200, b'{"content": [{"type": "tool_use", "name": "record_extraction", "input": {"total": NaN}}]}'),
         PermanentJobError, "AI_PROVIDER_ERROR", None),
    ],
)
async def test_anthropic_errors_map_to_error_codes(
    server: FakeServer, client: httpx.AsyncClient, reply: Reply, error: type[JobError], code: str,
    retry_after: float | None,
) -> None:
    server.replies.append(reply)
    with pytest.raises(error) as caught:
        await AnthropicProvider(anthropic_config(server)).extract(document(), SCHEMA, client)
    assert caught.value.code == code
    assert caught.value.retry_after_s == retry_after


async def test_anthropic_timeout_is_retryable(server: FakeServer, client: httpx.AsyncClient) -> None:
    server.replies.append(Reply(body=tool_use(ANSWER), delay_s=2))
    with pytest.raises(TransientJobError) as caught:
        await AnthropicProvider(anthropic_config(server, timeout_ms=200)).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_TIMEOUT"


# --- through the pipeline -------------------------------------------------------------------

def config_for(server: FakeServer) -> Config:
    base = load_config(environ={})
    return dataclasses.replace(base, openai=openai_config(server), anthropic=anthropic_config(server))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_schema_chooses_its_provider_and_values_are_located(
    server: FakeServer, tmp_path: Path, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    server.replies.append(Reply(body=chat(json.dumps(ANSWER)) if provider == "openai" else tool_use(ANSWER)))
    extraction = await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": provider}, config_for(server))
    assert extraction.result == ANSWER
    assert extraction.page_count == 1
    meta = extraction.meta
    assert meta["provider"] == provider
    assert meta["model"] in ("test-model", "claude-test")
    assert meta["usage"]["requests"] == 1
    assert meta["fields"]["/invoice_number"]["page"] == 1
    assert meta["fields"]["/invoice_number"]["text"] == "INV-7"
    assert meta["fields"]["/total"]["text"] == "$ 12.50"
    assert meta["fields"]["/date"]["text"] == "12/03/2024"
    assert len(meta["fields"]["/total"]["bbox"]) == 4
    # docex's own keyword never reaches the provider.
    assert "x-docex-provider" not in json.dumps(server.requests[0].body)
    assert KEY not in caplog.text


async def test_default_provider_comes_from_the_configuration(server: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    config = config_for(server)
    config = dataclasses.replace(config, extraction=dataclasses.replace(config.extraction, provider="anthropic"))
    server.replies.append(Reply(body=tool_use(ANSWER)))
    extraction = await extract(path, filetypes.TXT, SCHEMA, config)
    assert extraction.meta["provider"] == "anthropic"
    rules = await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": "rules"}, config)
    assert rules.meta["provider"] == "rules" and rules.result["invoice_number"] == "INV-7"
    assert len(server.requests) == 1


async def test_an_unknown_provider_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": "magic"}, load_config(environ={}))
    assert caught.value.code == "AI_PROVIDER_ERROR"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_vendors_service_without_a_key_is_a_clear_permanent_failure(
        server: FakeServer, tmp_path: Path, provider: str) -> None:
    """The document went out with no key, to a 401 (a DNS failure offline) after three
    attempts; a compatible server elsewhere (a local model) may need none."""
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": provider}, load_config(environ={}))
    assert caught.value.code == "AI_PROVIDER_ERROR"
    assert str(caught.value) == (f"{provider}.api_key is not set (DOCEX_{provider.upper()}_API_KEY, "
                                 f"or api_key in the config file's [{provider}])")
    keyless = config_for(server)
    keyless = dataclasses.replace(keyless, **{provider: dataclasses.replace(getattr(keyless, provider), api_key=None)})
    server.replies.append(Reply(body=chat(json.dumps(ANSWER)) if provider == "openai" else tool_use(ANSWER)))
    extraction = await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": provider}, keyless)
    assert extraction.result == ANSWER


# --- incomplete and invalid answers (SPEC §7) --------------------------------------------------

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "total": {"type": "number"},
        "vendor": {"type": "object", "properties": {"name": {"type": "string"}, "address": {"type": "string"}},
                   "required": ["name", "address"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"}, "amount": {"type": "number"}}, "required": ["description", "amount"]}},
    },
    "required": ["invoice_number", "total", "vendor", "items"],
}
# What a model found: no total (null), no vendor address, the second row without its amount.
LACKING = {"invoice_number": "INV-7", "total": None, "vendor": {"name": "ACME Ltd"},
           "items": [{"description": "Widget", "amount": 10.0}, {"description": "Gadget"}]}


def answer(provider: str, result: dict[str, Any]) -> Reply:
    return Reply(body=chat(json.dumps(result)) if provider == "openai" else tool_use(result))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_answer_lacking_required_values_is_incomplete_not_invalid(
        server: FakeServer, tmp_path: Path, provider: str) -> None:
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    server.replies.append(answer(provider, LACKING))
    extraction = await extract(path, filetypes.TXT, {**NESTED, "x-docex-provider": provider}, config_for(server))
    assert extraction.result == {"invoice_number": "INV-7", "vendor": {"name": "ACME Ltd"},
                                 "items": [{"description": "Widget", "amount": 10.0}, {"description": "Gadget"}]}
    assert extraction.meta["complete"] is False
    assert extraction.meta["missing"] == ["/vendor/address", "/items/1/amount", "/total"]
    assert len(server.requests) == 1

    server.replies.append(answer(provider, LACKING))
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.TXT, {**NESTED, "x-docex-provider": provider, "x-docex-incomplete": "fail"},
                      config_for(server))
    assert caught.value.code == "RESULT_INVALID"
    assert caught.value.message == ("Result does not match the schema: required values not found: "
                                    "/vendor/address, /items/1/amount, /total")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_answer_with_nul_characters_is_kept_without_them(
        server: FakeServer, tmp_path: Path, provider: str) -> None:
    """A result that held a NUL could never be saved back: a request body may hold none."""
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    server.replies.append(answer(provider, {**ANSWER, "invoice_number": "INV\u0000-7"}))
    extraction = await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": provider}, config_for(server))
    assert extraction.result == ANSWER


async def test_json_mode_asks_again_for_wrong_values_never_for_missing_ones(
        server: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    refusal = Reply(400, {"error": {"message": "response_format json_schema is not supported"}})
    definition = {**NESTED, "x-docex-provider": "openai"}
    # Only values missing: no corrective turn (it would invite invented ones); the job needs a person.
    server.replies += [refusal, answer("openai", LACKING)]
    extraction = await extract(path, filetypes.TXT, definition, config_for(server))
    assert extraction.meta["missing"] == ["/vendor/address", "/items/1/amount", "/total"]
    assert extraction.meta["usage"]["requests"] == 1 and len(server.requests) == 2

    # A date that is no date is wrong: the model is told so, and its correction is kept.
    dated = {**NESTED, "properties": {**NESTED["properties"], "date": {"type": "string", "format": "date"}}}
    server.replies += [answer("openai", {**ANSWER, "vendor": {"name": "ACME", "address": "1 Main St"},
                                         "date": "12/03/2024"}),
                       answer("openai", {**ANSWER, "vendor": {"name": "ACME", "address": "1 Main St"},
                                         "date": "2024-03-12"})]
    extraction = await extract(path, filetypes.TXT, {**dated, "x-docex-provider": "openai"}, config_for(server))
    assert extraction.result["date"] == "2024-03-12" and extraction.meta["complete"] is True
    assert "/date: '12/03/2024' is not a 'date'" in server.requests[-1].body["messages"][-1]["content"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_wrong_value_is_result_invalid_even_beside_missing_ones(
        server: FakeServer, tmp_path: Path, provider: str) -> None:
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    wrong = {**LACKING, "total": "a lot"}

    def respond(request: Recorded) -> Reply:
        # openai: a server without json_schema, so JSON mode, whose corrective turn gets the same answer.
        if (request.body.get("response_format") or {}).get("type") == "json_schema":
            return Reply(400, {"error": {"message": "response_format json_schema is not supported"}})
        return answer(provider, wrong)

    server.respond = respond
    with pytest.raises(PermanentJobError) as caught:
        await extract(path, filetypes.TXT, {**NESTED, "x-docex-provider": provider}, config_for(server))
    assert caught.value.code == "RESULT_INVALID"
    assert caught.value.message == ("Result does not match the schema: /total: 'a lot' is not of type 'number'; "
                                    "required values not found: /vendor/address, /items/1/amount")
    assert len(server.requests) == (3 if provider == "openai" else 1)


# --- the worker pool ------------------------------------------------------------------------

async def test_the_worker_pool_sends_its_jobs_over_one_connection(server: FakeServer, services: Services,
                                                                   app: Any) -> None:
    from jobs_helpers import INVOICE_TXT, create_job, create_schema, register, running_workers, wait_for_status

    services.apply_config(dataclasses.replace(services.config, openai=openai_config(server)))
    server.respond = lambda request: Reply(body=chat(json.dumps({"invoice_number": "INV-42", "total": 12.5})))
    api = app.test_client()
    alice = await register(api)
    schema_id = await create_schema(api, alice, {**SCHEMA, "required": [], "x-docex-provider": "openai"})
    async with running_workers(services, workers=1):
        for _ in range(3):
            job = await create_job(api, alice, schema_id, INVOICE_TXT)
            done = await wait_for_status(api, alice, job["id"], "COMPLETED", "FAILED")
            assert done["status"] == "COMPLETED", done
            assert done["result"]["invoice_number"] == "INV-42"
    assert len(server.requests) == 3
    # One client for the process: its keep-alive connection carries every job's request.
    assert server.connections == 1


async def test_through_the_pool_a_lacking_answer_completes_and_a_wrong_one_fails(
        server: FakeServer, services: Services, app: Any) -> None:
    from jobs_helpers import (
        INVOICE_TXT,
        create_job,
        create_schema,
        events_of,
        register,
        running_workers,
        wait_for_status,
    )

    services.apply_config(dataclasses.replace(services.config, anthropic=anthropic_config(server)))
    server.respond = lambda request: Reply(body=tool_use(
        LACKING if "INV-42" in request.body["messages"][0]["content"] else {**ANSWER, "total": "twelve"}))
    api = app.test_client()
    alice = await register(api)
    schema_id = await create_schema(api, alice, {**NESTED, "x-docex-provider": "anthropic"})
    async with running_workers(services, workers=1):
        lacking = await create_job(api, alice, schema_id, INVOICE_TXT)
        wrong = await create_job(api, alice, schema_id, TEXT.encode())
        done = await wait_for_status(api, alice, lacking["id"], "COMPLETED", "FAILED")
        failed = await wait_for_status(api, alice, wrong["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done
    assert done["resultMeta"]["provider"] == "anthropic" and done["resultMeta"]["complete"] is False
    assert done["resultMeta"]["missing"] == ["/vendor/address", "/items/1/amount", "/total"]
    assert failed["status"] == "FAILED" and failed["errorCode"] == "RESULT_INVALID", failed
    assert failed["errorMessage"].startswith("Result does not match the schema: /total: 'twelve' is not of type")
    assert failed["attempts"] == 1  # not retried: asking again gives the same answer
    assert [row.type for row in await events_of(services, job_id=wrong["id"])][-1] == "job.failed"


# --- learning from corrections (issue #16) ------------------------------------------------------

RECEIPT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "shop": {"type": "string"}, "receipt_number": {"type": "string"}, "total": {"type": "number"}}}


def receipt(head: str, number: str) -> bytes:
    return f"{head}\nUSt-IdNr DE123456789\nBon {number}\nKaffee 3.50\nSumme EUR 7.70\n".encode()


def system_prompt(provider: str, request: Recorded) -> str:
    return str(request.body["messages"][0]["content"] if provider == "openai" else request.body["system"])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_correction_reaches_the_prompt_of_the_issuers_next_document_as_a_worked_example(
        server: FakeServer, services: Services, app: Any, provider: str) -> None:
    from jobs_helpers import create_job, create_schema, register, running_workers, wait_for_status

    services.apply_config(dataclasses.replace(services.config, openai=openai_config(server),
                                              anthropic=anthropic_config(server)))
    server.respond = lambda request: answer(provider, {"shop": "KAFFEEHAUS MUELLER GMBH", "total": 7.7})
    api = app.test_client()
    alice = await register(api)
    schema_id = await create_schema(api, alice, {**RECEIPT_SCHEMA, "x-docex-provider": provider})

    async def run(data: bytes) -> dict[str, Any]:
        job = await create_job(api, alice, schema_id, data)
        async with running_workers(services, workers=1):
            done = await wait_for_status(api, alice, job["id"], "COMPLETED", "FAILED")
        assert done["status"] == "COMPLETED", done
        return done

    first = await run(receipt("KAFFEEHAUS MUELLER GMBH", "4711-A"))
    assert "Earlier documents" not in system_prompt(provider, server.requests[-1])
    r = await api.patch(f"/api/jobs/{first['id']}/result", headers=alice,
                        json={"result": {**first["result"], "receipt_number": "4711-A"}})
    assert r.status_code == 200

    await run(receipt("KAFFEEHAUS MUELLER GMBH", "5823-B"))
    prompt = system_prompt(provider, server.requests[-1])
    assert '"/receipt_number": "4711-A"' in prompt and '"/receipt_number" stood after "BON"' in prompt
    # Another issuer's document gets no example.
    await run(receipt("BAECKEREI SCHMIDT KG\nBahnhofstrasse 3", "9999-C").replace(b"DE123456789", b"DE987654321"))
    assert "4711-A" not in system_prompt(provider, server.requests[-1])


async def test_a_schema_the_server_refuses_does_not_take_structured_output_from_the_others(
    server: FakeServer, client: httpx.AsyncClient
) -> None:
    # OpenAI refuses a strict schema over its limits; remembering that for the whole server
    # put every later job of every user in JSON mode until a restart.
    server.replies += [
        Reply(400, {"error": {"message": "Invalid schema for response_format 'extraction': too many enum values"}}),
        Reply(body=chat(json.dumps(ANSWER))),
        Reply(body=chat(json.dumps(ANSWER))),
    ]
    provider = OpenAIProvider(openai_config(server))
    assert (await provider.extract(document(), SCHEMA, client)).result == ANSWER
    await provider.extract(document(), SCHEMA, client)
    assert [r.body["response_format"]["type"] for r in server.requests] == ["json_schema", "json_object",
                                                                           "json_schema"]


# --- hostile servers and keys -------------------------------------------------------------


def provider_of(name: str, server: FakeServer, timeout_ms: int = 5000, key: str = KEY) -> Any:
    if name == "openai":
        return OpenAIProvider(dataclasses.replace(openai_config(server, timeout_ms), api_key=Secret(key)))
    return AnthropicProvider(dataclasses.replace(anthropic_config(server, timeout_ms), api_key=Secret(key)))


def as_body(reply: Reply) -> bytes:
    return reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_packed_answer_is_never_unpacked_past_the_answer_limit(
        server: FakeServer, client: httpx.AsyncClient, provider: str) -> None:
    """2 MB of gzip was 2 GiB of zeros in the daemon's memory, and the loop stalled for seconds."""
    import gzip

    bomb = gzip.compress(b"0" * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB of zeros in ~64 KB
    server.replies.append(Reply(body=bomb, headers={"content-encoding": "gzip"}))
    with pytest.raises(PermanentJobError) as caught:
        await provider_of(provider, server).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_ERROR"
    assert caught.value.message == f"{provider}: the answer is larger than 1,048,576 bytes, which no extraction needs"
    assert server.requests[0].headers["accept-encoding"] == "identity"
    # A server that packs a fair answer all the same is still read.
    server.replies.append(Reply(body=gzip.compress(as_body(answer(provider, ANSWER))),
                                headers={"content-encoding": "gzip"}))
    output = await provider_of(provider, server).extract(document(), SCHEMA, client)
    assert output.result == ANSWER


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_answer_past_the_limit_is_refused_unread(
        server: FakeServer, client: httpx.AsyncClient, provider: str) -> None:
    """A 100 MB answer became a COMPLETED result of 200 MB, at 1.5 GB of memory per job."""
    server.replies.append(answer(provider, {**ANSWER, "invoice_number": "X" * (2 * 1024 * 1024)}))
    with pytest.raises(PermanentJobError) as caught:
        await provider_of(provider, server).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_ERROR" and "larger than 1,048,576 bytes" in caught.value.message


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_server_that_drips_its_answer_times_out_as_a_whole(
        server: FakeServer, client: httpx.AsyncClient, provider: str) -> None:
    """httpx's timeout bounds each read: a byte every 0.1 s never tripped it, and a job, its
    worker with it, stayed RUNNING for as long as the server liked."""
    server.replies.append(Reply(body=as_body(answer(provider, ANSWER)), drip_s=0.1))
    started = trio.current_time()
    with pytest.raises(TransientJobError) as caught:
        await provider_of(provider, server, timeout_ms=1000).extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_TIMEOUT"
    assert trio.current_time() - started < 3


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_key_the_server_echoes_is_scrubbed_before_the_message_is_cut(
        server: FakeServer, client: httpx.AsyncClient, provider: str) -> None:
    """The message was cut to 300 characters first: a key at the cut kept all but its end."""
    for text in ("x" * 280 + f" credential {KEY}", f"Incorrect API key provided: {KEY.upper()}"):
        server.replies.append(Reply(401, {"error": {"message": text}}))
        with pytest.raises(PermanentJobError) as caught:
            await provider_of(provider, server).extract(document(), SCHEMA, client)
        assert KEY[:12].lower() not in caught.value.message.lower(), caught.value.message


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_key_http_refuses_is_never_quoted(server: FakeServer, client: httpx.AsyncClient,
                                                  provider: str) -> None:
    """A key ending in a newline (a key file written with echo): httpx refused the header and
    its message, the key in it, became every failed job's errorMessage."""
    with pytest.raises(PermanentJobError) as caught:
        await provider_of(provider, server, key=KEY + "\n").extract(document(), SCHEMA, client)
    assert caught.value.code == "AI_PROVIDER_ERROR"
    assert KEY not in caught.value.message and "sk-test" not in caught.value.message
    assert server.requests == []


def test_a_key_with_a_line_break_is_refused_by_the_configuration() -> None:
    from daemon.errors import ConfigError

    for variable in ("DOCEX_OPENAI_API_KEY", "DOCEX_ANTHROPIC_API_KEY"):
        with pytest.raises(ConfigError) as caught:
            load_config(environ={variable: KEY + "\n"})
        (problem,) = [p for p in caught.value.problems if "api_key" in p]
        assert problem.endswith("must be printable ASCII with no space or line break (a key file written with "
                                "echo ends in a newline: write it with printf '%s', or strip it)")
        assert KEY not in problem


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_unpaired_surrogate_in_an_answer_is_replaced(server: FakeServer, tmp_path: Path,
                                                              provider: str) -> None:
    """Stored as it came, it broke every export of the schema mid-stream and every JSON
    webhook of the job, and the result could not be saved back."""
    path = tmp_path / "invoice.txt"
    path.write_text(TEXT)
    wire = as_body(answer(provider, ANSWER)).replace(b"INV-7", b"INV\\\\ud800-7" if provider == "openai"
                                                      else b"INV\\ud800-7")
    server.replies.append(Reply(body=wire))
    extraction = await extract(path, filetypes.TXT, {**SCHEMA, "x-docex-provider": provider}, config_for(server))
    assert extraction.result["invoice_number"] == "INV\ufffd-7"
    json.dumps(extraction.result, ensure_ascii=False).encode("utf-8")  # what exports and webhooks write
    json.dumps(extraction.meta, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("usage", [{"prompt_tokens": "lots"}, [1], {"prompt_tokens": -5, "completion_tokens": True}])
async def test_a_malformed_usage_costs_the_count_not_the_result(
        server: FakeServer, client: httpx.AsyncClient, usage: Any) -> None:
    server.replies.append(Reply(body={**chat(json.dumps(ANSWER)), "usage": usage}))
    output = await OpenAIProvider(openai_config(server)).extract(document(), SCHEMA, client)
    assert output.result == ANSWER and output.usage == {"requests": 1, "inputTokens": 0, "outputTokens": 0}


async def test_a_message_that_is_not_an_object_is_a_provider_error(server: FakeServer,
                                                                   client: httpx.AsyncClient) -> None:
    server.replies.append(Reply(body={"choices": [{"message": "hi"}]}))
    with pytest.raises(PermanentJobError) as caught:
        await OpenAIProvider(openai_config(server)).extract(document(), SCHEMA, client)
    assert (caught.value.code, caught.value.message) == ("AI_PROVIDER_ERROR",
                                                         "openai: the answer's message is not an object")


async def test_a_provider_error_quoting_unstorable_characters_fails_the_job_at_once(
        server: FakeServer, services: Services, app: Any) -> None:
    """A NUL or an unpaired surrogate in a provider's error: the database refused the
    message, the outcome was lost, and the job ran again until "the worker stopped
    responding 3 times"."""
    from jobs_helpers import create_job, create_schema, register, running_workers, wait_for_status

    services.apply_config(dataclasses.replace(services.config, openai=openai_config(server)))
    server.respond = lambda request: Reply(400, b'{"error": {"message": "bad \\u0000 request \\ud800 here"}}')
    api = app.test_client()
    alice = await register(api)
    schema_id = await create_schema(api, alice, {**SCHEMA, "x-docex-provider": "openai"})
    async with running_workers(services, workers=1):
        job = await create_job(api, alice, schema_id, TEXT.encode())
        failed = await wait_for_status(api, alice, job["id"], "COMPLETED", "FAILED")
    assert (failed["status"], failed["errorCode"], failed["attempts"]) == ("FAILED", "AI_PROVIDER_ERROR", 1), failed
    assert failed["errorMessage"] == "openai answered 400: bad  request \ufffd here"
