"""One result from several OCR readings of a document: each field's value is
the one most readings agree on.

A scanned document may be read more than once (`ScannedDocument`: other
image treatments, other page segmentations); OCR misreads differently each
time, so what most readings read is likelier what is printed.
"""

from __future__ import annotations

from typing import Any

from daemon.extraction.providers.rules.fields import pointer_token, properties


def agree(schema: dict[str, Any], pointer: str, results: list[dict[str, Any]], evidences: list[dict[str, Any]],
          result: dict[str, Any], evidence: dict[str, Any]) -> None:
    """Each scalar field's value in most readings (the surest of those readings'
    values on a tie; the first reading's on a tie of sureness too); arrays as the
    first reading has them. Writes into `result` and `evidence`."""
    for name, sub, json_type in properties(schema):
        path = f"{pointer}/{pointer_token(name)}"
        if json_type == "object":
            nested: dict[str, Any] = {}
            parts: list[dict[str, Any]] = []
            for values in results:
                part = values.get(name)
                parts.append(part if isinstance(part, dict) else {})
            agree(sub, path, parts, evidences, nested, evidence)
            if nested:
                result[name] = nested
            continue
        if json_type == "array":
            if name in results[0]:
                result[name] = results[0][name]
                evidence.update({k: v for k, v in evidences[0].items() if k.startswith(path + "/")})
            continue
        groups: dict[str, list[tuple[float, int]]] = {}
        for index, values in enumerate(results):
            if name in values:
                sure = float(evidences[index].get(path, {}).get("confidence", 0.0))
                groups.setdefault(vote_key(values[name]), []).append((sure, index))
        if not groups:
            continue
        members = max(groups.values(), key=lambda group: (len(group), max(group)[0], -min(i for _, i in group)))
        _, index = max(members, key=lambda member: (member[0], -member[1]))
        result[name] = results[index][name]
        if path in evidences[index]:
            evidence[path] = evidences[index][path]


def vote_key(value: Any) -> str:
    """What two readings' values have in common when they are the same value
    (text without case or spacing differences, amounts to the cent)."""
    if isinstance(value, str):
        return " ".join(value.upper().split())
    if isinstance(value, float):
        return repr(round(value, 2))
    return repr(value)
