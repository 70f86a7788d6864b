"""The `anthropic` provider: the Messages API with one tool whose
``input_schema`` is the schema, and ``tool_choice`` forcing the model to call
it; the tool call's input is the result.

Overloaded (529) and 5xx answers are retryable AI_PROVIDER_ERROR, 429 is
AI_PROVIDER_RATE_LIMIT with the server's Retry-After. The API key travels in
``x-api-key`` only and is scrubbed from any error message.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx

from daemon import jsonvalues
from daemon.config import AnthropicConfig
from daemon.errors import PermanentJobError
from daemon.extraction.document import Document
from daemon.extraction.providers.base import ProviderOutput
from daemon.extraction.providers.llm import (
    MAX_OUTPUT_TOKENS,
    ask_in_chunks,
    classify_response,
    instructions_with,
    post,
    tokens,
)

API_VERSION = "2023-06-01"
TOOL = "record_extraction"


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, config: AnthropicConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + "/v1/messages"
        self._key = config.api_key.reveal() if config.api_key is not None else None

    async def extract(self, document: Document, definition: dict[str, Any],
                      client: httpx.AsyncClient, *, examples: str = "") -> ProviderOutput:
        ask = functools.partial(self._ask, client, definition, instructions_with(examples))
        return await ask_in_chunks("anthropic", self.config.model, document, ask)

    async def _ask(self, client: httpx.AsyncClient, definition: dict[str, Any], instructions: str,
                   text: str) -> tuple[dict[str, Any], list[dict[str, int]]]:
        schema = {k: v for k, v in definition.items() if k != "$schema"}
        body = {
            "model": self.config.model,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "temperature": 0,
            "system": instructions,
            "messages": [{"role": "user", "content": text}],
            "tools": [{
                "name": TOOL,
                "description": "Record the values extracted from the document, as the schema describes them.",
                "input_schema": schema,
            }],
            "tool_choice": {"type": "tool", "name": TOOL},
        }
        headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if self._key:
            headers["x-api-key"] = self._key
        response = await post("anthropic", client, self.url, body=body, headers=headers,
                              timeout_s=self.config.timeout_ms / 1000, secret=self._key)
        problem = classify_response("anthropic", response, self._key)
        if problem is not None:
            raise problem
        try:
            data = jsonvalues.loads(response.content)
        except (ValueError, RecursionError) as exc:  # not JSON, a number beyond a double, nested too deep
            raise PermanentJobError("AI_PROVIDER_ERROR", "anthropic: the answer is not JSON") from exc
        blocks = data.get("content") if isinstance(data, dict) else None
        call = next((b for b in blocks or [] if isinstance(b, dict) and b.get("type") == "tool_use"
                     and b.get("name") == TOOL), None)
        if call is None or not isinstance(call.get("input"), dict):
            reason = data.get("stop_reason") if isinstance(data, dict) else None
            raise PermanentJobError("AI_PROVIDER_ERROR",
                                    f"anthropic: the model did not call the extraction tool (stop: {reason})")
        usage = data.get("usage")
        return call["input"], [{"inputTokens": tokens(usage, "input_tokens"),
                                "outputTokens": tokens(usage, "output_tokens")}]
