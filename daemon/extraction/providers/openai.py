"""The `openai` provider: any OpenAI-compatible chat-completions server
(OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp, LM Studio).

Structured output first (``response_format: json_schema``, strict); a server
that refuses that parameter is asked again in JSON mode
(``response_format: json_object``) with the schema in the prompt, and the
answer is validated against the schema, with one corrective turn when a
value has the wrong type or shape. A required value the model did not find
is not asked for again (that invites an invented one): the result is then
incomplete, for a person to finish (SPEC §7). Which servers lack json_schema
is remembered per base URL for the life of the process.

The API key goes only into the Authorization header; it is never logged and
is scrubbed from any error message a server echoes back.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx

from daemon import jsonvalues
from daemon.config import OpenAIConfig
from daemon.errors import PermanentJobError
from daemon.extraction.document import Document
from daemon.extraction.providers.base import ProviderOutput
from daemon.extraction.providers.llm import (
    MAX_OUTPUT_TOKENS,
    ask_in_chunks,
    classify_response,
    drop_nulls,
    instructions_with,
    parse_json_answer,
    post,
    strict_schema,
    tokens,
)
from daemon.schemas.definition import check_result

# Base URLs whose servers do not take response_format json_schema at all.
_NO_JSON_SCHEMA: set[str] = set()


class OpenAIProvider:
    name = "openai"

    def __init__(self, config: OpenAIConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._key = config.api_key.reveal() if config.api_key is not None else None

    async def extract(self, document: Document, definition: dict[str, Any],
                      client: httpx.AsyncClient, *, examples: str = "") -> ProviderOutput:
        ask = functools.partial(self._ask, client, definition, instructions_with(examples))
        return await ask_in_chunks("openai", self.config.model, document, ask)

    async def _ask(self, client: httpx.AsyncClient, definition: dict[str, Any], instructions: str,
                   text: str) -> tuple[dict[str, Any], list[dict[str, int]]]:
        if self.config.base_url not in _NO_JSON_SCHEMA:
            messages = [{"role": "system", "content": instructions}, {"role": "user", "content": text}]
            body = self._body(messages, {
                "type": "json_schema",
                "json_schema": {"name": "extraction", "strict": True, "schema": strict_schema(definition)},
            })
            response = await self._post(client, body)
            if not _refuses_json_schema(response):
                data = self._check(response)
                return parse_json_answer(_content(data)), [_usage(data)]
            if not _refuses_this_schema(response):
                _NO_JSON_SCHEMA.add(self.config.base_url)
        return await self._ask_json_mode(client, definition, instructions, text)

    async def _ask_json_mode(self, client: httpx.AsyncClient, definition: dict[str, Any], instructions: str,
                             text: str) -> tuple[dict[str, Any], list[dict[str, int]]]:
        json_mode = (f"{instructions}\nAnswer with one JSON object only, valid against this JSON Schema:\n"
                     f"{json.dumps(definition)}")
        messages: list[dict[str, str]] = [{"role": "system", "content": json_mode},
                                          {"role": "user", "content": text}]
        data = self._check(await self._post(client, self._body(messages, {"type": "json_object"})))
        usages = [_usage(data)]
        answer = _content(data)
        result = drop_nulls(parse_json_answer(answer))
        problems = check_result(definition, result).problems[:20]
        if problems:
            # One corrective turn: the model sees what did not match.
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": "That JSON does not match the schema:\n- "
                          + "\n- ".join(problems) + "\nAnswer again with the corrected JSON object only."}]
            data = self._check(await self._post(client, self._body(messages, {"type": "json_object"})))
            usages.append(_usage(data))
            result = drop_nulls(parse_json_answer(_content(data)))
        return result, usages

    def _body(self, messages: list[dict[str, str]], response_format: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "response_format": response_format,
        }

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
            headers["api-key"] = self._key  # Azure OpenAI's header; others ignore it
        return await post("openai", client, self.url, body=body, headers=headers,
                          timeout_s=self.config.timeout_ms / 1000, secret=self._key)

    def _check(self, response: httpx.Response) -> dict[str, Any]:
        problem = classify_response("openai", response, self._key)
        if problem is not None:
            raise problem
        try:
            data = jsonvalues.loads(response.content)
        except (ValueError, RecursionError) as exc:  # not JSON, a number beyond a double, nested too deep
            raise PermanentJobError("AI_PROVIDER_ERROR", "openai: the answer is not JSON") from exc
        if not isinstance(data, dict):
            raise PermanentJobError("AI_PROVIDER_ERROR", "openai: unexpected answer")
        return data


def _refuses_json_schema(response: httpx.Response) -> bool:
    if response.status_code not in (400, 404, 422, 501):
        return False
    text = response.text.lower()
    return "response_format" in text or "json_schema" in text or "structured" in text


def _refuses_this_schema(response: httpx.Response) -> bool:
    """Whether the server takes json_schema but not this one (OpenAI: "Invalid schema for
    response_format 'extraction': ..." for a schema over its limits). That is one schema's,
    one user's: the server's other schemas keep structured output."""
    return "invalid schema" in response.text.lower()


def _content(data: dict[str, Any]) -> str:
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise PermanentJobError("AI_PROVIDER_ERROR", "openai: the answer has no message") from exc
    if not isinstance(message, dict):
        raise PermanentJobError("AI_PROVIDER_ERROR", "openai: the answer's message is not an object")
    if message.get("refusal"):
        raise PermanentJobError("AI_PROVIDER_ERROR", f"openai: the model refused: {message['refusal']}"[:300])
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if not isinstance(content, str) or not content.strip():
        raise PermanentJobError("AI_PROVIDER_ERROR", "openai: the answer is empty")
    return content


def _usage(data: dict[str, Any]) -> dict[str, int]:
    usage = data.get("usage")
    return {"inputTokens": tokens(usage, "prompt_tokens"), "outputTokens": tokens(usage, "completion_tokens")}
