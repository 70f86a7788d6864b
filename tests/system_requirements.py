"""What a test needs from the machine beyond pip: skipped where it is missing, a failure in CI.

`make test` must pass on a machine that has nothing but Python 3.11+, so a test
that needs a system program (tesseract, chromium, systemd-analyze) or root skips
there, with a reason that names what to install. CI installs all of them and
sets ``DOCEX_TEST_REQUIRE_ALL=1``, which turns every such skip into a failure: a
missing install step cannot hide behind a green run.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE_ALL = os.environ.get("DOCEX_TEST_REQUIRE_ALL") == "1"


def unavailable(reason: str) -> NoReturn:
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (DOCEX_TEST_REQUIRE_ALL=1 requires it)", pytrace=False)
    pytest.skip(reason)


def require_program(program: str, *, debian_package: str) -> str:
    """The program's path; skip (or fail in CI) when it is not on PATH."""
    path = shutil.which(program)
    if path is None:
        unavailable(f"needs `{program}`: apt-get install {debian_package}")
    return path


def require_root(why: str) -> None:
    if os.geteuid() != 0:
        unavailable(f"needs root: {why}")


def require_tesseract() -> None:
    require_program("tesseract", debian_package="tesseract-ocr")


# For a whole test: `@needs_tesseract`, `@needs_root`; the fixtures are in tests/conftest.py.
# An async test must use these marks rather than call `require_*` in its body: pytest-trio
# re-raises a skip from inside trio without its reason.
needs_tesseract = pytest.mark.usefixtures("tesseract_installed")
needs_root = pytest.mark.usefixtures("running_as_root")
