"""Configuration layering, parsing and validation (SPEC §2)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from daemon.config import (
    Config,
    ConfigError,
    RateLimit,
    Secret,
    describe,
    env_name,
    hot_reload,
    load_config,
    parse_duration,
    parse_rate,
    parse_size,
    with_dev_secrets,
)

KEY = "ab" * 32
JWT = "x" * 40


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_need_no_file_and_match_the_spec() -> None:
    c = load_config(environ={})
    assert (c.host, c.port, c.env) == ("127.0.0.1", 8080, "development")
    assert c.database_url == "sqlite:///data/docex.db"
    assert c.auth.access_ttl_s == 900 and c.auth.refresh_ttl_s == 30 * 86400
    assert c.auth.api_key_prefix == "dx_live_" and c.auth.max_api_keys_per_user == 25
    assert c.jobs.max_file_size_bytes == 50 * 1024 * 1024 and c.jobs.max_pages == 500
    assert (c.jobs.workers, c.jobs.max_attempts) == (4, 3)
    w = c.webhooks
    assert (w.timeout_ms, w.backoff_initial_ms, w.max_attempts, w.auto_disable_threshold) == (10000, 30000, 8, 5)
    assert w.backoff_cap_ms == 6 * 3600 * 1000
    assert c.rate_limits.login == RateLimit(10, 60) and c.rate_limits.authenticated == RateLimit(1200, 60)
    assert c.extraction.provider == "rules"


def test_state_directory_is_the_default_data_dir_under_systemd() -> None:
    assert load_config(environ={"STATE_DIRECTORY": "/var/lib/docex"}).data_dir == "/var/lib/docex"


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, 'host = "0.0.0.0"\nport = 9000\n[log]\nlevel = "warning"\n')
    c = load_config(path, environ={"DOCEX_PORT": "9100", "DOCEX_LOG_LEVEL": "error"}, overrides={"port": 9200})
    assert c.host == "0.0.0.0"  # file
    assert c.port == 9200  # flag over environment over file
    assert c.log.level == "error"  # environment over file


def test_seed_variable_names_are_kept() -> None:
    env = {
        "JWT_ACCESS_SECRET": JWT, "JWT_ACCESS_EXPIRES_IN": "5m", "JWT_REFRESH_EXPIRES_IN": "7d",
        "API_KEY_PREFIX": "acme_live_", "MAX_API_KEYS_PER_USER": "3", "MAX_FILE_SIZE": "10MiB",
        "WEBHOOK_TIMEOUT_MS": "2500", "WEBHOOK_BACKOFF_INITIAL_MS": "1s", "WEBHOOK_MAX_ATTEMPTS": "4",
        "WEBHOOK_AUTO_DISABLE_THRESHOLD": "2", "WEBHOOK_ENCRYPTION_KEY": KEY,
    }
    c = load_config(environ=env)
    assert c.auth.jwt_access_secret == Secret(JWT)
    assert (c.auth.access_ttl_s, c.auth.refresh_ttl_s) == (300, 7 * 86400)
    assert (c.auth.api_key_prefix, c.auth.max_api_keys_per_user) == ("acme_live_", 3)
    assert c.jobs.max_file_size_bytes == 10 * 1024 * 1024
    assert (c.webhooks.timeout_ms, c.webhooks.backoff_initial_ms) == (2500, 1000)
    assert (c.webhooks.max_attempts, c.webhooks.auto_disable_threshold) == (4, 2)


def test_other_settings_are_docex_section_key() -> None:
    assert env_name("webhooks", "allow_http") == "DOCEX_WEBHOOKS_ALLOW_HTTP"
    assert env_name("jobs", "lease_s") == "DOCEX_JOBS_LEASE"
    assert env_name("database", "url") == "DOCEX_DATABASE_URL"
    assert env_name(None, "data_dir") == "DOCEX_DATA_DIR"
    c = load_config(environ={"DOCEX_WEBHOOKS_ALLOW_HTTP": "true", "DOCEX_JOBS_LEASE": "2m"})
    assert c.webhooks.allow_http is True and c.jobs.lease_s == 120


@pytest.mark.parametrize(
    ("raw", "unit_s", "expected"),
    [("15m", 1, 900), ("30d", 1, 2592000), ("10s", 0.001, 10000), ("250ms", 0.001, 250), (45, 1, 45),
     ("1.5h", 1, 5400)],
)
def test_durations(raw: object, unit_s: float, expected: int) -> None:
    assert parse_duration(raw, unit_s) == expected


def test_sizes_and_rates() -> None:
    assert parse_size("50MiB") == 50 * 1024**2 and parse_size("1 GB") == 10**9 and parse_size(1024) == 1024
    assert parse_rate("10/min") == RateLimit(10, 60)
    assert parse_rate("5/s") == RateLimit(5, 1) and parse_rate("100/15m") == RateLimit(100, 900)


def test_every_problem_is_reported_one_line_each(tmp_path: Path) -> None:
    path = write(tmp_path, 'port = "eighty"\nbogus = 1\n[jobs]\nworkers = -1\nnope = 2\n[log]\nlevel = "loud"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"JWT_ACCESS_EXPIRES_IN": "soon", "WEBHOOK_ENCRYPTION_KEY": "short"})
    problems = info.value.problems
    assert any(p.startswith("port:") for p in problems)
    assert "bogus: unknown setting" in problems
    assert "jobs.nope: unknown setting" in problems
    assert any(p.startswith("jobs.workers:") for p in problems)
    assert any(p.startswith("log.level:") for p in problems)
    assert any(p.startswith("JWT_ACCESS_EXPIRES_IN:") for p in problems)
    assert any(p.startswith("WEBHOOK_ENCRYPTION_KEY:") for p in problems)
    assert not any("short" in p for p in problems), "a rejected secret must not be echoed"


def test_broken_toml_is_one_clear_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "[log\nlevel="), environ={})
    assert len(info.value.problems) == 1 and "invalid TOML" in info.value.problems[0]


def test_an_ai_provider_by_default_needs_its_vendors_key_unless_it_is_served_elsewhere() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"DOCEX_EXTRACTION_PROVIDER": "openai"})
    assert info.value.problems == ["extraction.provider = 'openai': openai.api_key is not set "
                                   "(DOCEX_OPENAI_API_KEY, or api_key in the config file's [openai])"]
    # The usual name of another tool's setting is not docex's.
    with pytest.raises(ConfigError):
        load_config(environ={"DOCEX_EXTRACTION_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-x"})
    assert load_config(environ={"DOCEX_EXTRACTION_PROVIDER": "anthropic", "DOCEX_ANTHROPIC_API_KEY": "sk-x"})
    assert load_config(environ={"DOCEX_EXTRACTION_PROVIDER": "openai",
                                "DOCEX_OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})  # a local model


def test_production_requires_both_secrets_and_names_them() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"DOCEX_ENV": "production"})
    assert sorted(p.split(":")[0] for p in info.value.problems) == ["JWT_ACCESS_SECRET", "WEBHOOK_ENCRYPTION_KEY"]
    ok = load_config(environ={"DOCEX_ENV": "production", "JWT_ACCESS_SECRET": JWT, "WEBHOOK_ENCRYPTION_KEY": KEY})
    assert ok.production


def test_development_secrets_are_generated_once_and_kept(tmp_path: Path) -> None:
    c = load_config(environ={"DOCEX_DATA_DIR": str(tmp_path)})
    first = with_dev_secrets(c)
    second = with_dev_secrets(c)
    assert first.auth.jwt_access_secret == second.auth.jwt_access_secret
    assert first.webhooks.encryption_key == second.webhooks.encryption_key
    assert len(first.webhooks.encryption_key.reveal()) == 64  # type: ignore[union-attr]
    path = tmp_path / "secrets.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert set(json.loads(path.read_text())) == {"jwt_access_secret", "webhook_encryption_key"}


def test_configured_secrets_win_over_generated_ones(tmp_path: Path) -> None:
    c = load_config(environ={"DOCEX_DATA_DIR": str(tmp_path), "JWT_ACCESS_SECRET": JWT, "WEBHOOK_ENCRYPTION_KEY": KEY})
    assert with_dev_secrets(c) is c
    assert not (tmp_path / "secrets.json").exists()


def test_secrets_are_masked_everywhere() -> None:
    c = load_config(environ={"JWT_ACCESS_SECRET": JWT, "DOCEX_DATABASE_URL": "postgresql://u:hunter2@db/x"})
    shown = json.dumps(describe(c)) + repr(c) + str(c)
    assert JWT not in shown and "hunter2" not in shown
    assert describe(c)["auth"]["jwt_access_secret"] == "********"


def test_hot_reload_keeps_cold_settings_and_names_them() -> None:
    old = load_config(environ={})
    new = load_config(environ={"DOCEX_PORT": "9999", "DOCEX_LOG_LEVEL": "debug", "DOCEX_JOBS_WORKERS": "8"})
    merged, cold = hot_reload(old, new)
    assert cold == ["port"]
    assert merged.port == 8080  # cold: stays until restart
    assert merged.log.level == "debug" and merged.jobs.workers == 8  # hot: applied
    assert isinstance(merged, Config)


def test_the_example_file_loads_and_shows_the_defaults() -> None:
    # config.toml.example is what operators copy: every key in it must be valid, and
    # the values it shows must be the ones docex uses when the key is left out.
    example = Path(__file__).resolve().parents[2] / "config.toml.example"
    assert load_config(example, environ={}) == load_config(environ={})


def test_the_review_threshold_is_a_number_from_0_to_1(tmp_path: Path) -> None:
    assert load_config(environ={}).review.confidence_threshold == 0.9
    assert load_config(environ={"DOCEX_REVIEW_CONFIDENCE_THRESHOLD": "0.75"}).review.confidence_threshold == 0.75
    path = write(tmp_path, "[review]\nconfidence_threshold = 1\n")
    assert load_config(path, environ={}).review.confidence_threshold == 1.0
    with pytest.raises(ConfigError) as bad:
        load_config(environ={"DOCEX_REVIEW_CONFIDENCE_THRESHOLD": "high"})
    assert bad.value.problems == ["DOCEX_REVIEW_CONFIDENCE_THRESHOLD: expected a number (got 'high')"]
    with pytest.raises(ConfigError) as bad:
        load_config(environ={"DOCEX_REVIEW_CONFIDENCE_THRESHOLD": "1.5"})
    assert bad.value.problems == ["review.confidence_threshold: must be 0-1 (got 1.5)"]


def test_the_inboxes_settings(tmp_path: Path) -> None:
    default = load_config(environ={}).inboxes
    assert (default.local_root, default.interval_s, default.settle_ms) == ("", 30, 500)
    path = write(tmp_path, f'[inboxes]\nlocal_root = "{tmp_path}"\ninterval = "2m"\nsettle = "1s"\n')
    loaded = load_config(path, environ={}).inboxes
    assert (loaded.local_root, loaded.interval_s, loaded.settle_ms) == (str(tmp_path), 120, 1000)
    assert load_config(environ={"DOCEX_INBOXES_INTERVAL": "5s"}).inboxes.interval_s == 5
    with pytest.raises(ConfigError) as bad:
        load_config(environ={"DOCEX_INBOXES_LOCAL_ROOT": "scans", "DOCEX_INBOXES_INTERVAL": "0s"})
    assert bad.value.problems == ["inboxes.interval: must be at least 1s",
                                  "inboxes.local_root: must be an absolute path (got 'scans')"]


def test_a_config_path_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    """/dev/zero was read until memory ran out, a FIFO waited for a writer for ever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 * 1024 * 1024) + "\n")
    for path, said in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                       (big, "larger than 1024 KiB"), (tmp_path / "none.toml", "not found")):
        with pytest.raises(ConfigError, match=said):
            load_config(str(path), environ={})


@pytest.mark.parametrize(("environ", "problem"), [
    ({"DOCEX_JOBS_LEASE": "1e300"}, "DOCEX_JOBS_LEASE: expected a duration"),
    ({"DOCEX_RATE_LIMITS_LOGIN": "5/0min"}, "DOCEX_RATE_LIMITS_LOGIN: the period must be at least 1"),
    ({"DOCEX_SERVER_KEEP_ALIVE_TIMEOUT": "0"}, "server.keep_alive_timeout: must be at least 1s"),
    ({"DOCEX_DATABASE_URL": "mysql://db/docex"}, "DOCEX_DATABASE_URL: must be a sqlite:///"),
    ({"DOCEX_DATABASE_URL": "not a url at all"}, "DOCEX_DATABASE_URL: must be a sqlite:///"),
])
def test_values_that_broke_the_running_daemon_are_refused(environ, problem) -> None:
    """Each passed `config check` and then made every login a 500 (a rate per 0 minutes),
    reset every connection (keep-alive 0), crashed the workers in a loop (a lease of 1e300 s)
    or ended `serve` with a traceback (a database URL docex cannot use)."""
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(("environ", "problem"), [
    ({"DOCEX_SERVER_METRICS_PORT": "70000"}, "server.metrics_port: must be 0 (none) or 1-65535"),
    ({"DOCEX_SERVER_METRICS_PORT": "-1"}, "server.metrics_port: must be 0 (none) or 1-65535"),
    ({"DOCEX_SERVER_METRICS_PORT": "8080"}, "server.metrics_port: must differ from port (8080)"),
])
def test_a_metrics_port_must_be_one_docex_can_listen_on_beside_the_api(environ, problem) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems
    assert load_config(environ={"DOCEX_SERVER_METRICS_PORT": "9101"}).server.metrics_port == 9101


def test_durations_in_a_file_must_be_finite_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    for text, problem in (("[jobs]\nlease = inf\n", "must be a finite duration"),
                          ("[jobs]\nlease = nan\n", "must be a finite duration"),
                          ("[server]\ngrace_period = 1e300\n", "must be at most 3650d")):
        path.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config(str(path), environ={})
        assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_a_reload_naming_another_data_directory_keeps_the_running_secrets(tmp_path: Path) -> None:
    """The data directory is cold; the development secrets in it signed the tokens already
    issued. A reload made new ones in the new directory and every user got 401."""
    from daemon.lifecycle import ConfigSource

    path = tmp_path / "c.toml"
    path.write_text(f'data_dir = "{tmp_path / "one"}"\n')
    source = ConfigSource(str(path), {})
    running = source.load()
    path.write_text(f'data_dir = "{tmp_path / "two"}"\n')
    reloaded = source.load(running)
    assert reloaded.data_dir == str(tmp_path / "two")
    assert reloaded.auth.jwt_access_secret == running.auth.jwt_access_secret
    assert reloaded.webhooks.encryption_key == running.webhooks.encryption_key
    assert not (tmp_path / "two").exists()
