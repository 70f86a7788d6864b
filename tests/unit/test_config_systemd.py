"""What systemd hands a service reaches the configuration: ``$CONFIGURATION_DIRECTORY``
holds config.toml, ``$CREDENTIALS_DIRECTORY`` the secrets, one file each, named after the
setting's environment variable."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from daemon.config import Secret, load_config
from daemon.errors import ConfigError

JWT = secrets.token_urlsafe(48)
KEY = secrets.token_hex(32)


@pytest.fixture
def credentials(tmp_path: Path) -> Path:
    directory = tmp_path / "credentials"
    directory.mkdir()
    # As `openssl rand ... > file` writes them: with a trailing newline.
    (directory / "JWT_ACCESS_SECRET").write_text(JWT + "\n")
    (directory / "WEBHOOK_ENCRYPTION_KEY").write_text(KEY + "\n")
    return directory


def test_a_credential_is_read_as_the_environment_variable_of_its_name(credentials: Path) -> None:
    (credentials / "DOCEX_DATABASE_URL").write_text("postgresql+psycopg://docex:pw@db/docex")
    config = load_config(environ={"CREDENTIALS_DIRECTORY": str(credentials), "DOCEX_ENV": "production"})
    assert config.auth.jwt_access_secret == Secret(JWT)
    assert config.webhooks.encryption_key == Secret(KEY)
    assert config.database.url == "postgresql+psycopg://docex:pw@db/docex"


def test_production_without_the_credentials_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"CREDENTIALS_DIRECTORY": str(tmp_path), "DOCEX_ENV": "production"})
    assert caught.value.problems == ["JWT_ACCESS_SECRET: required when DOCEX_ENV=production",
                                     "WEBHOOK_ENCRYPTION_KEY: required when DOCEX_ENV=production"]


def test_the_environment_wins_over_a_credential(credentials: Path) -> None:
    other = secrets.token_urlsafe(48)
    config = load_config(environ={"CREDENTIALS_DIRECTORY": str(credentials), "JWT_ACCESS_SECRET": other})
    assert config.auth.jwt_access_secret == Secret(other)


def test_a_credential_wins_over_config_toml(credentials: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[auth]\njwt_access_secret = "{secrets.token_urlsafe(48)}"\n')
    config = load_config(path, environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.auth.jwt_access_secret == Secret(JWT)


def test_files_that_name_no_setting_are_left_alone(credentials: Path) -> None:
    (credentials / "tls.key").write_bytes(b"\xff\xfe not ours, not UTF-8")
    config = load_config(environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.auth.jwt_access_secret == Secret(JWT)


def test_an_unreadable_credential_is_a_config_error_that_names_it(credentials: Path) -> None:
    (credentials / "DOCEX_DATABASE_URL").mkdir()
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert [p.split(" (")[0] for p in caught.value.problems] == ["credential DOCEX_DATABASE_URL: cannot be read"]


def test_a_bad_credential_is_reported_without_its_value(credentials: Path) -> None:
    (credentials / "WEBHOOK_ENCRYPTION_KEY").write_text("not-hex-and-secret")
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert caught.value.problems == ["WEBHOOK_ENCRYPTION_KEY: must be 64 hex characters (32 bytes)"]


def test_config_toml_defaults_to_the_configuration_directory(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("port = 9123\n")
    assert load_config(environ={"CONFIGURATION_DIRECTORY": str(tmp_path)}).port == 9123


def test_docex_config_wins_over_the_configuration_directory(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("port = 9123\n")
    (tmp_path / "other.toml").write_text("port = 9124\n")
    environ = {"CONFIGURATION_DIRECTORY": str(tmp_path), "DOCEX_CONFIG": str(tmp_path / "other.toml")}
    assert load_config(environ=environ).port == 9124


def test_a_configuration_directory_without_config_toml_is_an_error(tmp_path: Path) -> None:
    # The unit says its configuration lives there: a missing file is a mistake, not defaults.
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"CONFIGURATION_DIRECTORY": str(tmp_path)})
    assert caught.value.problems == [f"config file {tmp_path / 'config.toml'}: not found"]
