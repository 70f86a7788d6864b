"""Unlabelled parties: the vendor at the top of a receipt, its address below."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.extraction.providers.rules.engine import Candidate, Engine


def vendor_candidate(engine: Engine) -> Candidate | None:
    return None


def address_candidate(engine: Engine) -> Candidate | None:
    return None
