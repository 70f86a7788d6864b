"""Configuration: defaults < config.toml < systemd credentials < environment < command-line flags.

Each section is a frozen dataclass; each field's metadata says its environment
variable (the seed's names where the seed has one, else ``DOCEX_SECTION_KEY``)
and whether SIGHUP may change it in a running process (``hot``). A field name
ending in ``_ms``/``_s`` holds a duration in that unit and accepts ``15m``,
``30d``, ``10s`` or a bare number in the unit; ``_bytes`` accepts ``50MiB``.

`load_config` parses everything at once and raises `ConfigError` listing every
problem, one line each, so an operator fixes them in one go.

Under systemd the file defaults to ``$CONFIGURATION_DIRECTORY/config.toml``
(``ConfigurationDirectory=docex``: ``/etc/docex``, readable, holding no
secrets), and a credential (``LoadCredential=NAME:/path``, copied by systemd
into ``$CREDENTIALS_DIRECTORY``, readable by the service's user only) named
after a setting's environment variable is read as that variable.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from daemon.errors import ConfigError


class Secret:
    """A string that never shows itself in a repr, a log line or `config check`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and secrets.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class RateLimit:
    """`count` requests per `period_s` seconds, written ``10/min``."""

    count: int
    period_s: int

    def __str__(self) -> str:
        return f"{self.count}/{self.period_s}s"


def _setting(default: Any, *, env: str | None = None, hot: bool = True, doc: str = "", repr: bool = True) -> Any:
    return field(default=default, repr=repr, metadata={"env": env, "hot": hot, "doc": doc})


@dataclass(frozen=True)
class DatabaseConfig:
    # Not in repr: a URL may carry a password (`describe` shows it masked).
    url: str = _setting("", hot=False, doc="SQLAlchemy URL; empty means SQLite in data_dir", repr=False)
    pool_size: int = _setting(10, hot=False)
    busy_timeout_ms: int = _setting(5000, hot=False)


@dataclass(frozen=True)
class StorageConfig:
    backend: str = _setting("local", hot=False, doc="local | s3")
    # The S3-compatible bucket of storage.backend = "s3", shared by processes on several hosts.
    # An empty access key uses boto3's own chain (AWS_* variables, instance profile).
    s3_bucket: str = _setting("", hot=False)
    s3_region: str = _setting("us-east-1", hot=False)
    s3_endpoint_url: str = _setting("", hot=False, doc="empty means AWS; set for MinIO and others")
    s3_prefix: str = _setting("", hot=False, doc="key prefix of every blob, e.g. docex/")
    s3_access_key_id: str = _setting("", hot=False)
    s3_secret_access_key: Secret | None = _setting(None, hot=False)


@dataclass(frozen=True)
class LogConfig:
    level: str = _setting("info")
    access: bool = _setting(True, doc="one JSON line per HTTP request")


@dataclass(frozen=True)
class ServerConfig:
    grace_period_s: int = _setting(30, doc="how long SIGTERM waits for requests and jobs")
    # Above the 60 s idle timeout of common reverse proxies, so the proxy closes first.
    keep_alive_timeout_s: int = _setting(75, hot=False, doc="an idle keep-alive connection is closed after this")
    watchdog: bool = _setting(True, doc="ping systemd's watchdog when WATCHDOG_USEC is set")
    # Behind a reverse proxy, the client address (rate limits, sessions list) comes from
    # X-Forwarded-For, trusting this many proxies; 0 trusts none and uses the peer address.
    trusted_proxy_hops: int = _setting(0, hot=False)
    # A second listener, on `host`, with the operations routes alone: how a `--role worker`
    # process (no API) is scraped and probed; 0 for none.
    metrics_port: int = _setting(0, hot=False, doc="serve /metrics, /api/health and /api/ready here too")


@dataclass(frozen=True)
class AuthConfig:
    jwt_access_secret: Secret | None = _setting(None, env="JWT_ACCESS_SECRET")
    access_ttl_s: int = _setting(15 * 60, env="JWT_ACCESS_EXPIRES_IN")
    refresh_ttl_s: int = _setting(30 * 86400, env="JWT_REFRESH_EXPIRES_IN")
    api_key_prefix: str = _setting("dx_live_", env="API_KEY_PREFIX")
    max_api_keys_per_user: int = _setting(25, env="MAX_API_KEYS_PER_USER")
    registration: str = _setting("open", doc="open | closed")
    bcrypt_rounds: int = _setting(12)


@dataclass(frozen=True)
class RateLimitConfig:
    login: RateLimit = _setting(RateLimit(10, 60))
    register: RateLimit = _setting(RateLimit(5, 60))
    refresh: RateLimit = _setting(RateLimit(60, 60))
    schema_convert: RateLimit = _setting(RateLimit(60, 60))
    authenticated: RateLimit = _setting(RateLimit(1200, 60))


@dataclass(frozen=True)
class JobsConfig:
    workers: int = _setting(4)
    max_attempts: int = _setting(3)
    max_file_size_bytes: int = _setting(50 * 1024 * 1024, env="MAX_FILE_SIZE")
    max_run_size_bytes: int = _setting(2 * 1024**3, doc="the files of one batch run's request, in all")
    max_pages: int = _setting(500)
    lease_s: int = _setting(60)
    retry_backoff_initial_ms: int = _setting(5000)
    idempotency_ttl_s: int = _setting(24 * 3600)


@dataclass(frozen=True)
class WebhooksConfig:
    timeout_ms: int = _setting(10_000, env="WEBHOOK_TIMEOUT_MS")
    backoff_initial_ms: int = _setting(30_000, env="WEBHOOK_BACKOFF_INITIAL_MS")
    backoff_cap_ms: int = _setting(6 * 3600 * 1000)
    max_attempts: int = _setting(8, env="WEBHOOK_MAX_ATTEMPTS")
    auto_disable_threshold: int = _setting(5, env="WEBHOOK_AUTO_DISABLE_THRESHOLD")
    # Cold: secrets at rest are sealed with it; a new key needs a restart (and a re-encryption).
    encryption_key: Secret | None = _setting(None, env="WEBHOOK_ENCRYPTION_KEY", hot=False)
    allow_http: bool = _setting(False)
    allow_private_networks: bool = _setting(False)
    secret_rotation_overlap_s: int = _setting(24 * 3600)
    concurrency: int = _setting(32)
    per_endpoint_concurrency: int = _setting(4)
    # A quarter of `concurrency`: one user's endpoints that hang hold at most these slots.
    per_user_concurrency: int = _setting(8)
    max_endpoints_per_user: int = _setting(50)


@dataclass(frozen=True)
class OpenAIConfig:
    base_url: str = _setting("https://api.openai.com/v1")
    model: str = _setting("gpt-4o-mini")
    api_key: Secret | None = _setting(None)
    timeout_ms: int = _setting(120_000)


@dataclass(frozen=True)
class AnthropicConfig:
    base_url: str = _setting("https://api.anthropic.com")
    model: str = _setting("claude-sonnet-4-5")
    api_key: Secret | None = _setting(None)
    timeout_ms: int = _setting(120_000)


@dataclass(frozen=True)
class GoogleConfig:
    """The OAuth client of the Google Drive integration; the URLs are overridable for tests."""

    client_id: str = _setting("")
    client_secret: Secret | None = _setting(None)
    redirect_url: str = _setting("", doc="https://<host>/api/integrations/google-drive/callback")
    auth_url: str = _setting("https://accounts.google.com/o/oauth2/v2/auth")
    token_url: str = _setting("https://oauth2.googleapis.com/token")
    revoke_url: str = _setting("https://oauth2.googleapis.com/revoke")
    api_base_url: str = _setting("https://www.googleapis.com/drive/v3")
    timeout_ms: int = _setting(60_000)

    @property
    def configured(self) -> bool:
        return bool(self.client_id and self.client_secret and self.redirect_url)


@dataclass(frozen=True)
class IntegrationsConfig:
    # Off: an S3 endpointUrl must resolve to a public address (SSRF guard, daemon.webhooks.ssrf).
    # On: users may also reach private, loopback and link-local addresses (MinIO on the LAN).
    allow_private_networks: bool = _setting(False)


@dataclass(frozen=True)
class ReviewConfig:
    # The rules provider's values at 0.9 or more are right about 99 % of the time on receipts.
    confidence_threshold: float = _setting(0.9, doc="GET /api/jobs?review=pending: a value under it needs a person")


@dataclass(frozen=True)
class LearningConfig:
    # Off: no job is read with learned examples and no correction teaches one (README
    # "Learning from corrections"); a schema turns it off alone with "x-docex-learning": false.
    enabled: bool = _setting(True, doc="corrections and approvals teach how each issuer's documents read")


@dataclass(frozen=True)
class InboxesConfig:
    """Watched inboxes (README "Watched inboxes"): folders whose new files become jobs."""

    local_root: str = _setting("", doc="local folders of inboxes (admins only) lie under it; empty: none allowed")
    interval_s: int = _setting(30, doc="how often each inbox is listed (a local folder is also woken by inotify)")
    # A file still being written is not taken: its mtime must be this old (a copy in progress
    # keeps moving it). Writers that rename a finished file into place lose nothing by it.
    settle_ms: int = _setting(500, doc="a local file is taken once unchanged for this long")
    # An S3 or Drive endpoint that accepts and never answers (or trickles a byte under the read
    # timeout) would hold its inbox's sweep for ever: the listing is given up after this, recorded
    # as the inbox's lastError, and tried again at the next interval.
    list_timeout_s: int = _setting(120, doc="a remote inbox's listing that takes longer is given up")


OCR_ENGINES = ("rapidocr", "tesseract")
# Extractors a schema (its x-docex-provider) or extraction.provider may name.
PROVIDERS = ("rules", "openai", "anthropic")


@dataclass(frozen=True)
class ExtractionConfig:
    provider: str = _setting("rules", doc="rules | openai | anthropic")
    ocr_engine: str = _setting("rapidocr", doc="rapidocr | tesseract (the tesseract-ocr package)")
    ocr_languages: str = _setting("eng", doc="tesseract's languages, e.g. eng+deu")
    # OCR takes the most memory of any parse (README "Extraction": figures per worker).
    ocr_concurrency: int = _setting(2, doc="OCR readings at once across the parser processes")
    # Limits on every parse (README "Extraction"): a document over one fails with
    # PARSE_TIMEOUT, PARSE_OUT_OF_MEMORY or DOCUMENT_TOO_LARGE, naming the setting.
    parse_timeout_s: int = _setting(600, doc="wall time per document; its parser process is killed")
    max_memory_bytes: int = _setting(2 * 1024**3, doc="address space of a parser process (RLIMIT_AS)")
    max_render_pixels: int = _setting(40_000_000, doc="a PDF page is rendered for OCR at 300 dpi or less")
    max_image_pixels: int = _setting(50_000_000, doc="pixels of an image (each frame)")
    max_cells: int = _setting(200_000, doc="cells of a CSV, XLSX or HTML document")
    max_text_chars: int = _setting(5_000_000, doc="characters of a document of any type")
    max_part_size_bytes: int = _setting(64 * 1024**2, doc="inflated size of one part of a DOCX or XLSX archive")


@dataclass(frozen=True)
class Config:
    env: str = _setting("development", hot=False, doc="development | production")
    host: str = _setting("127.0.0.1", hot=False)
    port: int = _setting(8080, hot=False)
    data_dir: str = _setting("", hot=False, doc="empty means $STATE_DIRECTORY or ./data")
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    log: LogConfig = field(default_factory=LogConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    rate_limits: RateLimitConfig = field(default_factory=RateLimitConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    webhooks: WebhooksConfig = field(default_factory=WebhooksConfig)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    anthropic: AnthropicConfig = field(default_factory=AnthropicConfig)
    google: GoogleConfig = field(default_factory=GoogleConfig)
    integrations: IntegrationsConfig = field(default_factory=IntegrationsConfig)
    review: ReviewConfig = field(default_factory=ReviewConfig)
    learning: LearningConfig = field(default_factory=LearningConfig)
    inboxes: InboxesConfig = field(default_factory=InboxesConfig)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    def make_data_dir(self) -> Path:
        """The data directory, made if missing: readable by docex's user only (it holds the
        database, every uploaded document and the development secrets). One that exists keeps
        the mode it was given."""
        self.data_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.data_path

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite:///{self.data_path / 'docex.db'}"

    @property
    def production(self) -> bool:
        return self.env == "production"


# A configuration file is a few KB: a larger one is not one (a log, a disk image).
MAX_CONFIG_FILE_BYTES = 1024 * 1024


class _NotAConfigFile(Exception):
    pass


def _read_config_file(path: Path) -> str:
    """The text of a configuration file: a regular file (a FIFO blocked for ever, /dev/zero
    was read until memory ran out) of at most `MAX_CONFIG_FILE_BYTES`."""
    if not path.is_file():
        if path.exists():
            raise _NotAConfigFile("not a regular file")
        raise FileNotFoundError(path)
    with path.open("rb") as fh:
        data = fh.read(MAX_CONFIG_FILE_BYTES + 1)
    if len(data) > MAX_CONFIG_FILE_BYTES:
        raise _NotAConfigFile(f"larger than {MAX_CONFIG_FILE_BYTES // 1024} KiB: not a configuration file")
    return data.decode("utf-8")


# --- parsing of single values -------------------------------------------------

_DURATION_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE_UNITS = {
    "": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
    "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
}
_RATE_PERIODS_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
                   "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


_MAX_DURATION_S = 3650 * 86400


def parse_duration(raw: Any, unit_s: float) -> int:
    """``"15m"``, ``"30d"``, ``"250ms"`` or a bare number in the field's unit → int in that unit."""
    if isinstance(raw, bool):
        raise ValueError("expected a duration such as 15m, 30d or 10s")
    if isinstance(raw, int | float):
        value = float(raw)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*", str(raw))
        if not m:
            raise ValueError("expected a duration such as 15m, 30d or 10s")
        number, unit = float(m.group(1)), m.group(2)
        value = number if unit is None else number * _DURATION_UNITS_S[unit] / unit_s
    if not math.isfinite(value):
        raise ValueError("must be a finite duration")
    if value < 0:
        raise ValueError("must not be negative")
    if value * unit_s > _MAX_DURATION_S:
        raise ValueError("must be at most 3650d")  # no timer, lease or date holds more
    return round(value)


def parse_size(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(raw))
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ValueError("expected a size such as 50MiB or a number of bytes")
        value = round(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError("must be positive")
    return value


def parse_rate(raw: Any) -> RateLimit:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*", str(raw).lower())
    if not m or m.group(3) not in _RATE_PERIODS_S:
        raise ValueError("expected a rate such as 10/min, 5/s or 100/1h")
    count, multiple = int(m.group(1)), int(m.group(2) or 1)
    if multiple == 0:
        raise ValueError("the period must be at least 1 (10/min, 100/1h)")
    return RateLimit(count, multiple * _RATE_PERIODS_S[m.group(3)])


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")


def _parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError("expected a whole number")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def _parse_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError("expected a number")
    try:
        return float(str(raw).strip()) if not isinstance(raw, int | float) else float(raw)
    except ValueError:
        raise ValueError("expected a number") from None


def _parse_value(name: str, kind: Any, raw: Any) -> Any:
    if name.endswith("_ms"):
        return parse_duration(raw, 0.001)
    if name.endswith("_s"):
        return parse_duration(raw, 1)
    if name.endswith("_bytes"):
        return parse_size(raw)
    if kind is RateLimit:
        return parse_rate(raw)
    if kind is bool:
        return _parse_bool(raw)
    if kind is int:
        return _parse_int(raw)
    if kind is float:
        return _parse_float(raw)
    if kind == Secret | None:
        return Secret(str(raw)) if str(raw) else None
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("expected a string")
    return str(raw)


# --- layering ------------------------------------------------------------------

def env_name(section: str | None, name: str) -> str:
    """The environment variable of a setting (the seed's own name where it has one)."""
    spec = _field(section, name)
    return spec.metadata.get("env") or "_".join(
        p.upper() for p in ("DOCEX", section, _strip_unit(name)) if p
    )


def _strip_unit(name: str) -> str:
    return re.sub(r"_(ms|s|bytes)$", "", name)


def _field(section: str | None, name: str) -> dataclasses.Field[Any]:
    cls = Config if section is None else _section_classes()[section]
    return next(f for f in dataclasses.fields(cls) if f.name == name)


@functools.cache  # the classes never change; resolving their hints is ~0.3 ms a call, ~80 calls a load
def _section_classes() -> dict[str, type]:
    hints = get_type_hints(Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name])}


def _file_key(name: str) -> str:
    """Keys in config.toml drop the unit suffix: ``timeout = "10s"``, ``max_file_size = "50MiB"``."""
    return _strip_unit(name)


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the effective configuration.

    Args:
        path: a TOML file; None means ``$DOCEX_CONFIG`` if set, else
            ``$CONFIGURATION_DIRECTORY/config.toml`` under systemd, else no file.
        environ: the environment (defaults to ``os.environ``), completed by the
            credentials in ``$CREDENTIALS_DIRECTORY``.
        overrides: command-line values by dotted path (``"host"``, ``"port"``).

    Raises:
        ConfigError: with one line per problem found anywhere.
    """
    environ = os.environ if environ is None else environ
    overrides = overrides or {}
    problems: list[str] = []
    file_data: dict[str, Any] = {}
    path = path or environ.get("DOCEX_CONFIG") or _systemd_config_file(environ)
    environ = {**_credentials(environ, problems), **environ}
    if path is not None:
        try:
            file_data = tomllib.loads(_read_config_file(Path(path)))
        except _NotAConfigFile as exc:
            problems.append(f"config file {path}: {exc}")
        except FileNotFoundError:
            problems.append(f"config file {path}: not found")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"config file {path}: cannot be read ({exc})")
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"config file {path}: invalid TOML ({exc})")
        except RecursionError:
            problems.append(f"config file {path}: nested too deeply to be a docex configuration")

    sections = _section_classes()
    for key, value in file_data.items():
        if key in sections:
            if not isinstance(value, dict):
                problems.append(f"{key}: must be a table [{key}]")
                continue
            known = {_file_key(f.name) for f in dataclasses.fields(sections[key])}
            problems += [f"{key}.{k}: unknown setting" for k in value if k not in known]
        elif key not in {_file_key(f.name) for f in dataclasses.fields(Config) if f.name not in sections}:
            problems.append(f"{key}: unknown setting")

    def resolve(section: str | None, cls: type) -> dict[str, Any]:
        values: dict[str, Any] = {}
        hints = get_type_hints(cls)
        table = file_data.get(section, {}) if section else file_data
        table = table if isinstance(table, dict) else {}
        for f in dataclasses.fields(cls):
            if section is None and f.name in sections:
                continue
            dotted = f"{section}.{_file_key(f.name)}" if section else _file_key(f.name)
            env = env_name(section, f.name)
            if dotted in overrides and overrides[dotted] is not None:
                raw, origin = overrides[dotted], f"--{dotted.replace('_', '-')}"
            elif env in environ:
                raw, origin = environ[env], env
            elif _file_key(f.name) in table:
                raw, origin = table[_file_key(f.name)], dotted
            else:
                continue
            try:
                values[f.name] = _parse_value(f.name, hints[f.name], raw)
            except ValueError as exc:
                shown = "********" if hints[f.name] == Secret | None else repr(raw)
                problems.append(f"{origin}: {exc} (got {shown})")
        return values

    top = resolve(None, Config)
    built = {name: cls(**resolve(name, cls)) for name, cls in sections.items()}
    if not top.get("data_dir"):
        top["data_dir"] = environ.get("STATE_DIRECTORY", "").split(":")[0] or "./data"
    config = Config(**top, **built)
    problems += _validate(config)
    if problems:
        raise ConfigError(problems)
    return config


def _systemd_config_file(environ: Mapping[str, str]) -> str | None:
    """``config.toml`` in the unit's ``ConfigurationDirectory=``, so ``docex serve`` and a
    ``systemd-run -p ConfigurationDirectory=docex docex ...`` read the same file."""
    directory = environ.get("CONFIGURATION_DIRECTORY", "").split(":")[0]
    return str(Path(directory) / "config.toml") if directory else None


def _credentials(environ: Mapping[str, str], problems: list[str]) -> dict[str, str]:
    """The systemd credentials named after a setting's environment variable, by that name.

    They rank below the environment: a credential stands in for a variable that is not
    set, and a variable set explicitly (``Environment=``, a shell) is the more specific
    choice, as it is over config.toml. Other files in the directory are not ours.
    """
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return {}
    found: dict[str, str] = {}
    for name in sorted(_setting_env_names()):
        path = Path(directory) / name
        try:
            # Files written by `echo` or `openssl rand` end in a newline that is no part of the value.
            found[name] = path.read_text(encoding="utf-8").removesuffix("\n")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"credential {name}: cannot be read ({exc})")
    return found


def _setting_env_names() -> set[str]:
    sections = _section_classes()
    names = {env_name(None, f.name) for f in dataclasses.fields(Config) if f.name not in sections}
    for section, cls in sections.items():
        names |= {env_name(section, f.name) for f in dataclasses.fields(cls)}
    return names


# The vendors' own services, which refuse every request without a key. A compatible
# server elsewhere (a model run locally) may need none.
_VENDOR_URLS = {"openai": "https://api.openai.com/", "anthropic": "https://api.anthropic.com/"}


def missing_key(name: str, config: Config) -> str | None:
    """Why provider `name` cannot be asked: its vendor's service is configured with no key.
    Without this the document went out with no key, to a 401 (or to a DNS failure offline),
    three attempts later."""
    section = getattr(config, name, None) if name in _VENDOR_URLS else None
    if section is None or section.api_key is not None:
        return None
    if not (section.base_url.rstrip("/") + "/").lower().startswith(_VENDOR_URLS[name]):
        return None
    return f"{name}.api_key is not set (DOCEX_{name.upper()}_API_KEY, or api_key in the config file's [{name}])"


def _validate(c: Config) -> list[str]:
    p: list[str] = []

    def check(ok: bool, line: str) -> None:
        if not ok:
            p.append(line)

    check(c.env in {"development", "production"}, f"env: must be development or production (got {c.env!r})")
    check(1 <= c.port <= 65535, f"port: must be 1-65535 (got {c.port})")
    check(c.log.level in {"debug", "info", "warning", "error"},
          f"log.level: must be debug, info, warning or error (got {c.log.level!r})")
    check(c.storage.backend in {"local", "s3"}, f"storage.backend: must be local or s3 (got {c.storage.backend!r})")
    if c.storage.backend == "s3":
        check(bool(c.storage.s3_bucket), 'storage.s3_bucket: required when storage.backend = "s3"')
    check(bool(c.storage.s3_access_key_id) == (c.storage.s3_secret_access_key is not None),
          "storage.s3_access_key_id and storage.s3_secret_access_key: set both or neither")
    for name, url in (("storage.s3_endpoint_url", c.storage.s3_endpoint_url),
                      ("google.redirect_url", c.google.redirect_url), ("google.auth_url", c.google.auth_url),
                      ("google.token_url", c.google.token_url), ("google.revoke_url", c.google.revoke_url),
                      ("google.api_base_url", c.google.api_base_url)):
        check(not url or bool(re.fullmatch(r"https?://[^\s/]+(/\S*)?", url)),
              f"{name}: must be an http(s) URL (got {url!r})")
    check(c.google.timeout_ms >= 1, "google.timeout: must be positive")
    check(c.database.pool_size >= 1, "database.pool_size: must be at least 1")
    check(c.server.keep_alive_timeout_s >= 1, "server.keep_alive_timeout: must be at least 1s")
    if c.database.url:
        from sqlalchemy.engine import make_url  # only for a URL given: this module loads before the heavy ones

        try:
            backend = make_url(c.database.url).get_backend_name()
        except Exception:  # sqlalchemy's ArgumentError, or a ValueError of a port that is no number
            backend = None
        check(backend in ("sqlite", "postgresql"),
              "DOCEX_DATABASE_URL: must be a sqlite:/// or postgresql+psycopg:// URL")
    check(0 <= c.review.confidence_threshold <= 1,
          f"review.confidence_threshold: must be 0-1 (got {c.review.confidence_threshold:g})")
    check(c.inboxes.interval_s >= 1, "inboxes.interval: must be at least 1s")
    check(c.inboxes.list_timeout_s >= 1, "inboxes.list_timeout: must be at least 1s")
    check(not c.inboxes.local_root or os.path.isabs(c.inboxes.local_root),
          f"inboxes.local_root: must be an absolute path (got {c.inboxes.local_root!r})")
    check(c.auth.registration in {"open", "closed"},
          f"auth.registration: must be open or closed (got {c.auth.registration!r})")
    check(4 <= c.auth.bcrypt_rounds <= 16, "auth.bcrypt_rounds: must be 4-16")
    # Upper bounds: an access token outlives a revocation check only by its lifetime, and a
    # date past year 9999 cannot be stored or compared at all.
    check(1 <= c.auth.access_ttl_s <= 86400, "JWT_ACCESS_EXPIRES_IN: must be 1s to 1d")
    check(1 <= c.auth.refresh_ttl_s <= 3650 * 86400, "JWT_REFRESH_EXPIRES_IN: must be 1s to 3650d")
    check(bool(re.fullmatch(r"[A-Za-z0-9_\-]{1,32}", c.auth.api_key_prefix)),
          "API_KEY_PREFIX: 1-32 letters, digits, _ or -")
    check(c.auth.max_api_keys_per_user >= 1, "MAX_API_KEYS_PER_USER: must be at least 1")
    check(0 <= c.server.trusted_proxy_hops <= 10, "server.trusted_proxy_hops: must be 0-10")
    check(0 <= c.server.metrics_port <= 65535, f"server.metrics_port: must be 0 (none) or 1-65535 "
                                               f"(got {c.server.metrics_port})")
    check(c.server.metrics_port != c.port, f"server.metrics_port: must differ from port ({c.port})")
    check(0 <= c.jobs.workers <= 256, "jobs.workers: must be 0-256")
    check(c.jobs.max_attempts >= 1, "jobs.max_attempts: must be at least 1")
    check(c.jobs.max_pages >= 1, "jobs.max_pages: must be at least 1")
    check(c.jobs.lease_s >= 5, "jobs.lease: must be at least 5s")
    check(c.webhooks.timeout_ms >= 1, "WEBHOOK_TIMEOUT_MS: must be positive")
    check(c.webhooks.max_attempts >= 1, "WEBHOOK_MAX_ATTEMPTS: must be at least 1")
    check(c.webhooks.max_endpoints_per_user >= 1, "webhooks.max_endpoints_per_user: must be at least 1")
    check(c.webhooks.auto_disable_threshold >= 1, "WEBHOOK_AUTO_DISABLE_THRESHOLD: must be at least 1")
    check(min(c.webhooks.concurrency, c.webhooks.per_endpoint_concurrency, c.webhooks.per_user_concurrency) >= 1,
          "webhooks.concurrency, webhooks.per_endpoint_concurrency and webhooks.per_user_concurrency: "
          "must be at least 1")
    key = c.webhooks.encryption_key
    check(key is None or bool(re.fullmatch(r"[0-9a-fA-F]{64}", key.reveal())),
          "WEBHOOK_ENCRYPTION_KEY: must be 64 hex characters (32 bytes)")
    secret = c.auth.jwt_access_secret
    check(secret is None or len(secret.reveal()) >= 32,
          "JWT_ACCESS_SECRET: must be at least 32 characters")
    for name, vendor in (("openai", c.openai), ("anthropic", c.anthropic)):
        # It goes into a header as it is: a newline (a key file written with echo) made httpx
        # refuse the request with a message quoting the header, key and all.
        check(vendor.api_key is None or bool(re.fullmatch(r"[\x21-\x7e]+", vendor.api_key.reveal())),
              f"{name}.api_key: must be printable ASCII with no space or line break (a key file written "
              "with echo ends in a newline: write it with printf '%s', or strip it)")
    check(c.extraction.provider in PROVIDERS,
          f"extraction.provider: must be rules, openai or anthropic (got {c.extraction.provider!r})")
    problem = missing_key(c.extraction.provider, c)
    check(problem is None, f"extraction.provider = {c.extraction.provider!r}: {problem}")
    check(c.extraction.ocr_engine in OCR_ENGINES,
          f"extraction.ocr_engine: must be rapidocr or tesseract (got {c.extraction.ocr_engine!r})")
    check(1 <= c.extraction.ocr_concurrency <= 256, "extraction.ocr_concurrency: must be 1-256")
    check(c.extraction.parse_timeout_s >= 1, "extraction.parse_timeout: must be at least 1s")
    # Below this even tesseract's worker cannot import its libraries (measured: ~0.2 GiB).
    check(c.extraction.max_memory_bytes >= 256 * 1024**2, "extraction.max_memory: must be at least 256MiB")
    for name in ("max_render_pixels", "max_image_pixels", "max_cells", "max_text_chars"):
        check(getattr(c.extraction, name) >= 1, f"extraction.{name}: must be at least 1")
    if c.production:
        check(secret is not None, "JWT_ACCESS_SECRET: required when DOCEX_ENV=production")
        check(key is not None, "WEBHOOK_ENCRYPTION_KEY: required when DOCEX_ENV=production")
    return p


# --- development secrets, reload, display ---------------------------------------

SECRETS_FILE = "secrets.json"


def with_dev_secrets(config: Config) -> Config:
    """Fill missing secrets from ``<data_dir>/secrets.json``, generating it once (0600).

    Production never gets here without both secrets (`load_config` refuses).
    """
    if config.auth.jwt_access_secret and config.webhooks.encryption_key:
        return config
    path = config.data_path / SECRETS_FILE
    if not path.exists():
        config.make_data_dir()
        wanted = {"jwt_access_secret": secrets.token_urlsafe(48), "webhook_encryption_key": secrets.token_hex(32)}
        tmp = path.with_name(f"{SECRETS_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(wanted, fh)
        # link() fails if the file exists: of processes starting together on a fresh data
        # directory, the first one's secrets win and every other reads those.
        try:
            os.link(tmp, path)
            # The webhook key seals every stored secret: an operator must know to keep this file.
            logging.getLogger(__name__).info(
                "generated the development secrets in %s (0600): keep it, or set JWT_ACCESS_SECRET and "
                "WEBHOOK_ENCRYPTION_KEY", path, extra={"action": "config.secrets_generated"})
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    stored: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    return dataclasses.replace(
        config,
        auth=dataclasses.replace(
            config.auth, jwt_access_secret=config.auth.jwt_access_secret or Secret(stored["jwt_access_secret"])
        ),
        webhooks=dataclasses.replace(
            config.webhooks,
            encryption_key=config.webhooks.encryption_key or Secret(stored["webhook_encryption_key"]),
        ),
    )


def hot_reload(old: Config, new: Config) -> tuple[Config, list[str]]:
    """What a running process applies on SIGHUP: `new` with every cold setting kept at
    its `old` value, and the dotted names of the cold settings that changed (they
    need a restart)."""
    cold = [name for name, a, b, f in _walk(old, new) if a != b and not f.metadata.get("hot", True)]
    merged = new
    for name in cold:
        section, _, key = name.rpartition(".")
        if section:
            part = dataclasses.replace(getattr(merged, section), **{key: getattr(getattr(old, section), key)})
            merged = dataclasses.replace(merged, **{section: part})
        else:
            merged = dataclasses.replace(merged, **{key: getattr(old, key)})
    return merged, cold


def _walk(a: Config, b: Config) -> list[tuple[str, Any, Any, dataclasses.Field[Any]]]:
    out = []
    for f in dataclasses.fields(Config):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if dataclasses.is_dataclass(va):
            out += [(f"{f.name}.{g.name}", getattr(va, g.name), getattr(vb, g.name), g)
                    for g in dataclasses.fields(va)]
        else:
            out.append((f.name, va, vb, f))
    return out


def describe(config: Config) -> dict[str, Any]:
    """The effective configuration as nested plain values, secrets masked."""
    out: dict[str, Any] = {}
    for name, value, _, _ in _walk(config, config):
        if isinstance(value, Secret):
            shown: Any = "********"
        elif isinstance(value, RateLimit):
            shown = str(value)
        elif isinstance(value, str) and "://" in value:
            shown = _mask_url(value)
        else:
            shown = value
        section, _, key = name.rpartition(".")
        (out.setdefault(section, {}) if section else out)[key] = shown
    out["database"]["effective_url"] = _mask_url(config.database_url)
    return out


def _mask_url(url: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1********@", url)
