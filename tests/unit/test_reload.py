"""`daemon.lifecycle`: what a SIGHUP does besides swapping the configuration."""

from __future__ import annotations

import logging

import pytest

from daemon.lifecycle import ConfigSource, reload
from daemon.services import Services


def _ocr_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "extraction.ocr_missing"]


async def test_sighup_looks_for_the_configured_ocr_engine_again(services: Services, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    # Checked at start and on each reload, not per job: an operator who configures (or removes)
    # tesseract and sends SIGHUP is told at once.
    monkeypatch.setenv("PATH", "/nonexistent")
    data_dir = services.config.data_dir
    with caplog.at_level(logging.WARNING):
        assert await reload(services, ConfigSource(None, {"data_dir": data_dir, "extraction.ocr_engine": "tesseract"}))
    assert len(_ocr_warnings(caplog)) == 1
    assert "tesseract" in _ocr_warnings(caplog)[0].getMessage()
    # Back to the default engine, installed with docex: tesseract is not looked for.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert await reload(services, ConfigSource(None, {"data_dir": data_dir}))
    assert _ocr_warnings(caplog) == []
