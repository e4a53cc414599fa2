"""The command line: a thin printer over the engine."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from gbfix import engine, report
from gbfix.config import find_config
from gbfix.entry import resolve
from gbfix.errors import GbfixError


def _progress(quiet: bool):
    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"gbfix [{time.perf_counter() - started:5.1f}s] {message}", err=True)

    return say


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--dry-run", "mode", flag_value="dry-run", default=True, help="Show the verified diff; write nothing (default).")
@click.option("--apply", "mode", flag_value="apply", help="Write the verified edits.")
@click.option("-e", "--entry", help="What to run: 'script.py ARGS', 'python -m pkg.mod ARGS' or 'pytest ARGS'.")
@click.option("--timeout", type=float, help="Seconds one run of the entry may take.")
@click.option("--unsafe-fixes", is_flag=True, default=None, help="Also try fixes that may change behaviour (still verified).")
@click.option("--fullgraph", is_flag=True, help="Aim for zero breaks; then add fullgraph=True where the program compiles, proven by a real run.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.version_option(package_name="gbfix")
def cli(
    paths: tuple[Path, ...], mode: str, entry: str | None, timeout: float | None, unsafe_fixes: bool | None, fullgraph: bool, quiet: bool
) -> None:
    """Find torch.compile graph breaks in PATHS, rewrite the code to remove them, prove each rewrite.

    PATHS are the files and folders gbfix may edit (default: the current folder).
    Exit codes: 0 nothing left to fix, 1 breaks found or edits to make, 2 error.
    """
    targets = list(paths) or [Path(".")]
    config = find_config(targets[0] if targets[0].exists() else Path.cwd())
    the_entry = resolve(entry, targets, Path.cwd())
    opts = engine.Options(
        unsafe_fixes=unsafe_fixes if unsafe_fixes is not None else bool(config and config.unsafe_fixes),
        timeout=timeout or (config.timeout if config and config.timeout else engine.Options.timeout),
        fullgraph=fullgraph,
    )
    result = engine.fix(targets, the_entry, opts, _progress(quiet))
    applied = mode == "apply"
    for finding in result.findings:
        click.echo(report.diagnostic(finding))
    if result.fixed and not applied:
        click.echo(result.diff(report.display_path), nl=False)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if applied:
        for path in engine.write(result):
            click.echo(f"wrote {report.display_path(path)}", err=True)
    click.echo(report.summary(result, applied), err=True)
    sys.exit(report.exit_code(result, applied))


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("gbfix: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        click.echo(f"gbfix: error: {e.format_message()}", err=True)
        sys.exit(2)
    except GbfixError as e:
        click.echo(f"gbfix: error: {e}", err=True)
        sys.exit(2)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - one line, never a traceback (GBFIX_DEBUG=1 shows it)
        if os.environ.get("GBFIX_DEBUG"):
            raise
        click.echo(f"gbfix: internal error: {type(e).__name__}: {e}", err=True)
        sys.exit(2)
