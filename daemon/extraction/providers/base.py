"""The provider seam: a parsed document plus a schema in, a result out.

The `rules` provider runs inside the parser's worker process (it is pure
CPU, and only its result needs to come back); the AI providers run on the
trio thread around an injected `httpx.AsyncClient` and take a parsed
`Document`. Errors (SPEC §6):

- ``AI_PROVIDER_TIMEOUT``, ``AI_PROVIDER_RATE_LIMIT`` (with the server's
  Retry-After) and ``AI_PROVIDER_ERROR`` for a 5xx are `TransientJobError`:
  the job is retried with backoff;
- any other refusal (4xx, an answer that is not JSON for the schema, a
  missing API key) is a `PermanentJobError` ``AI_PROVIDER_ERROR``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from daemon.extraction.document import Document


@dataclass
class ProviderOutput:
    result: dict[str, Any]
    model: str | None = None
    usage: dict[str, int] | None = None
    # Evidence the provider knows itself; the pipeline locates the rest in the document.
    fields: dict[str, Any] = field(default_factory=dict)


class AIProvider(Protocol):
    name: str

    async def extract(self, document: Document, definition: dict[str, Any],
                      client: httpx.AsyncClient, *, examples: str = "") -> ProviderOutput:
        """The result for `definition` read from `document`; `examples` is prompt text of
        worked examples of the document's issuer (`learning.worked_examples`), if any.

        Raises:
            TransientJobError: timeouts, rate limits and server errors (retryable).
            PermanentJobError: AI_PROVIDER_ERROR for anything retrying will not fix.
        """
        ...
