"""The `docex` command: argument parsing → config → logging → trio.run.

Exit codes: 0 success, 1 runtime failure, 2 invalid configuration or usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import trio

from daemon import __version__
from daemon.config import OCR_ENGINES, Config, describe, load_config, with_dev_secrets
from daemon.errors import ConfigError, StartupError
from daemon.logs import is_journal_stream

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docex", description="Self-hosted document extraction daemon.")
    parser.add_argument("--version", action="version", version=f"docex {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", metavar="FILE", help="config.toml (default: $DOCEX_CONFIG, else "
                       "$CONFIGURATION_DIRECTORY/config.toml under systemd, else none)")
        return p

    serve = with_config(commands.add_parser("serve", help="run the daemon"))
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="bind port (default 8080)")
    serve.add_argument("--role", choices=["api", "worker", "all"], default="all",
                       help="api: HTTP only; worker: jobs and webhooks only; all (default): both")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")

    with_config(commands.add_parser("migrate", help="apply database migrations and exit"))

    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    with_config(config_commands.add_parser("check", help="validate and print the effective configuration"))

    commands.add_parser("openapi", help="print the OpenAPI document")

    users = commands.add_parser("users", help="account tools for headless setups")
    users_commands = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    create = with_config(users_commands.add_parser(
        "create", help="create an account; the password is read from stdin (or prompted on a terminal)"))
    create.add_argument("--email", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--admin", action="store_true", help="make the account ADMIN (default USER)")
    reset = with_config(users_commands.add_parser(
        "set-password", help="give an account a new password (read like create's) and end its sessions"))
    reset.add_argument("--email", required=True)

    extract = with_config(commands.add_parser(
        "extract", help="extract one file with a schema and print the result as JSON (no daemon, no database)"))
    extract.add_argument("file", metavar="FILE", help="the document (its type is told from its bytes)")
    extract.add_argument("--schema", required=True, metavar="SCHEMA_JSON", help="a JSON Schema definition file")
    extract.add_argument("--provider", choices=["rules", "openai", "anthropic"],
                         help="override the schema's x-docex-provider and extraction.provider")
    extract.add_argument("--ocr-engine", choices=list(OCR_ENGINES),
                         help="override extraction.ocr_engine for images and scanned pages")
    submit = commands.add_parser(
        "submit", help="send files to a running docex (DOCEX_URL, DOCEX_API_KEY) and print their jobs or results")
    submit.add_argument("files", nargs="+", metavar="FILE", help="documents, one job each")
    submit.add_argument("--schema", required=True, metavar="ID", help="the schema's id")
    submit.add_argument("--wait", action="store_true", help="wait for every job to end and print its result")
    submit.add_argument("--format", choices=["json", "csv"], default="json",
                        help="json: one object per file (default); csv: a column per schema value")
    submit.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is "
                        "not a terminal")
    return parser


def _load(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Config:
    try:
        return load_config(getattr(args, "config", None), overrides=overrides)
    except ConfigError as exc:
        # Under systemd, at error priority: `journalctl -p err` shows why the unit does not start.
        priority = "<3>" if is_journal_stream(sys.stderr) else ""
        for problem in exc.problems:
            print(f"{priority}docex: config: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def main(argv: Sequence[str] | None = None) -> None:
    try:
        _run(_parser().parse_args(argv))
    except BrokenPipeError:
        # The reader went away (`docex openapi | head`): what it read is all it wanted. Python
        # would print a traceback flushing stdout at exit; point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise
        # A full or read-only disk under the output or the data directory: the operator's to
        # mend, said in one line (it was a 30-line traceback).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"docex: {exc.strerror}: {exc.filename or 'the output'}", file=sys.stderr)
        sys.exit(1)


def _run(args: argparse.Namespace) -> None:
    if args.command == "serve":
        _serve(args)
    elif args.command == "migrate":
        _migrate(args)
    elif args.command == "config":
        _config_check(args)
    elif args.command == "openapi":
        _openapi()
    elif args.command == "users" and args.users_command == "create":
        _create_user(args)
    elif args.command == "users":
        _set_password(args)
    elif args.command == "extract":
        _extract(args)
    elif args.command == "submit":
        _submit(args)


def _serve(args: argparse.Namespace) -> None:
    # Until the daemon's own handler runs, a SIGHUP's default action would end the process
    # without a word (a reload sent by a script while it starts): note it, to reload once ready.
    hangups: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, _frame: hangups.append(signum))
    overrides = {"host": args.host, "port": args.port}
    config = _load(args, overrides)  # before the heavy imports: a bad config exits 2 at once

    from daemon.lifecycle import ConfigSource, serve
    from daemon.logs import configure_logging
    from daemon.services import ProcessRole

    configure_logging(config.log.level)
    config = with_dev_secrets(config)
    source = ConfigSource(args.config, overrides, hangups)
    try:
        trio.run(lambda: serve(config, source, role=ProcessRole(args.role), migrate=not args.no_migrate))
    except* StartupError as group:
        # except*: the nurseries between here and the failing part wrap it in exception groups.
        _fail(*_leaves(group))


def _fail(*problems: BaseException) -> NoReturn:
    """One line per problem on stderr (at error priority under journald), exit 1."""
    priority = "<3>" if is_journal_stream(sys.stderr) else ""
    for problem in problems:
        print(f"{priority}docex: {problem}", file=sys.stderr)
    raise SystemExit(EXIT_RUNTIME) from None


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """The exceptions inside `group` and the groups nested in it."""
    return [leaf for exc in group.exceptions
            for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])]


def _migrate(args: argparse.Namespace) -> None:
    from daemon.logs import configure_logging
    from daemon.storage.database import Database
    from daemon.storage.migrate import head_revision, upgrade
    from daemon.webhooks.keys import configured_key

    config = with_dev_secrets(_load(args))
    configure_logging(config.log.level)
    config.make_data_dir()
    db = Database(config.database_url, pool_size=1)
    try:
        upgrade(db.engine, encryption_key=configured_key(config.webhooks))
    except StartupError as exc:
        _fail(exc)
    finally:
        db.dispose()
    print(f"database at revision {head_revision()}")


def _config_check(args: argparse.Namespace) -> None:
    config = _load(args)
    print(json.dumps(describe(config), indent=2, default=str))


def _openapi() -> None:
    from daemon.http.app import create_app
    from daemon.services import Services
    from daemon.storage.database import Database

    async def fetch() -> Any:
        # The document is built from the routes alone; the database is never touched.
        from daemon.storage.blobs import LocalBlobStore

        services = Services(config=Config(data_dir="."), db=Database("sqlite://"), blobs=LocalBlobStore(Path(".")))
        app = create_app(services)
        response = await app.test_client().get("/api/openapi.json")
        return await response.get_json()

    print(json.dumps(trio.run(fetch), indent=2))


def _password_from_stdin() -> str:
    """The password typed twice on a terminal, else the first line of stdin (its line end,
    a Unix or a Windows one, is not part of it)."""
    import getpass

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Repeat: ") != password:
            raise SystemExit("docex: passwords differ")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
        if not password:
            raise SystemExit("docex: no password on stdin (pipe it in, or run in a terminal to be asked)")
    if "\0" in password:
        # The API takes JSON, which cannot carry one: nobody could sign in with it.
        print("docex: password must not contain a NUL character", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)
    return password


def _account_command(args: argparse.Namespace, body_model: Any, fields: dict[str, Any],
                     act: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """Validate `fields` as the API would (`body_model`), then run `act(services, body)`
    on the configured database, migrated first. Exit 2 for what the API answers 400, 1 else."""
    from pydantic import ValidationError

    from daemon.errors import ApiError, BadRequest
    from daemon.http.validation import messages
    from daemon.services import open_services
    from daemon.storage.migrate import upgrade
    from daemon.webhooks.keys import configured_key

    try:
        body = body_model(**fields)
    except ValidationError as exc:
        for message in messages(exc):
            print(f"docex: {message}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    config = with_dev_secrets(_load(args))
    config.make_data_dir()

    async def run() -> Any:
        async with open_services(config) as services:
            await trio.to_thread.run_sync(functools.partial(
                upgrade, services.db.engine, encryption_key=configured_key(services.config.webhooks)))
            return await act(services, body)

    try:
        return trio.run(run)
    except ApiError as exc:
        print(f"docex: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG if isinstance(exc, BadRequest) else 1) from None
    except StartupError as exc:
        _fail(exc)


def _create_user(args: argparse.Namespace) -> None:
    from daemon.auth.accounts import create_user
    from daemon.http.auth import RegisterBody
    from daemon.storage.repos.accounts import Role

    password = _password_from_stdin()
    user = _account_command(
        args, RegisterBody, {"name": args.name, "email": args.email, "password": password},
        lambda services, body: create_user(services, name=body.name, email=body.email, password=body.password,
                                           role=Role.ADMIN if args.admin else Role.USER, ignore_registration=True))
    print(json.dumps({"id": user.id, "email": user.email, "name": user.name, "role": user.role}))


def _set_password(args: argparse.Namespace) -> None:
    from daemon.auth.accounts import reset_password
    from daemon.http.auth import ResetPasswordBody

    password = _password_from_stdin()
    user = _account_command(args, ResetPasswordBody, {"email": args.email, "newPassword": password},
                            lambda services, body: reset_password(services, email=body.email,
                                                                  new=body.newPassword))
    print(json.dumps({"id": user.id, "email": user.email, "name": user.name, "role": user.role}))


def _extract(args: argparse.Namespace) -> None:
    from daemon.extraction.command import run

    config = _load(args)
    if args.ocr_engine:
        config = dataclasses.replace(config, extraction=dataclasses.replace(config.extraction,
                                                                            ocr_engine=args.ocr_engine))
    raise SystemExit(run(args.file, args.schema, args.provider, config))


def _submit(args: argparse.Namespace) -> None:
    import os

    from daemon.submit import DEFAULT_URL, UsageError, submit

    progress_to = sys.stderr if args.progress or sys.stderr.isatty() else None
    try:
        status = trio.run(functools.partial(
            submit, args.files, args.schema, url=os.environ.get("DOCEX_URL") or DEFAULT_URL,
            api_key=os.environ.get("DOCEX_API_KEY"), wait=args.wait, fmt=args.format, out=sys.stdout,
            progress_to=progress_to))
    except UsageError as problem:
        print(f"docex submit: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    raise SystemExit(status)


if __name__ == "__main__":
    main()
