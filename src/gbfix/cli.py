"""The command line: a thin printer over the engine, the linter and the catalog.

``gbfix [fix options] PATHS`` runs the default command, ``fix``; ``gbfix explain CODE``
and ``gbfix lint PATHS`` are the other commands. Modules are imported inside the commands
that need them: ``lint`` and ``explain`` never import torch, and ``lint`` not even
libcst, so that it starts fast enough to run on every commit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from gbfix.errors import GbfixError

_HELP = {"help_option_names": ["-h", "--help"]}


class _DefaultGroup(click.Group):
    """A group whose first argument, when it is not a command name, goes to ``fix``.

    So ``gbfix --dry-run -e "python t.py" src/`` and ``gbfix src/`` keep working;
    ``gbfix fix lint`` fixes a folder named ``lint``.
    """

    default = "fix"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help", "--version")):
            args = [self.default, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        prog = ctx.command_path
        formatter.write_usage(prog, "[fix] [OPTIONS] [PATHS]...")
        for name in self.list_commands(ctx):
            if name != self.default:
                cmd = self.commands[name]
                formatter.write_text(f"{' ' * len('Usage: ')}{prog} {name} {' '.join(cmd.collect_usage_pieces(ctx))}")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        fix_cmd = self.commands[self.default]
        records = [r for p in fix_cmd.get_params(ctx) if p.name != "help" and (r := p.get_help_record(ctx))]
        with formatter.section("Options (fix, the default command)"):
            formatter.write_dl(records)
        self.format_commands(ctx, formatter)
        own = [r for p in self.get_params(ctx) if (r := p.get_help_record(ctx))]
        with formatter.section("Other options"):
            formatter.write_dl(own)


@click.group(cls=_DefaultGroup, context_settings=_HELP)
@click.version_option(package_name="gbfix")
def cli() -> None:
    """Find torch.compile graph breaks in PATHS, rewrite the code to remove them, prove each rewrite.

    Without a command gbfix runs `fix`; name it (`gbfix fix lint`) to fix a path called
    like a command. Exit codes: 0 nothing left to fix, 1 breaks found or edits to make, 2 error.
    """


def _progress(quiet: bool):
    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"gbfix [{time.perf_counter() - started:5.1f}s] {message}", err=True)

    return say


@cli.command(context_settings=_HELP, short_help="Detect, fix and verify graph breaks (the default command).")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--dry-run", "mode", flag_value="dry-run", default=True, help="Show the verified diff; write nothing (default).")
@click.option("--apply", "mode", flag_value="apply", help="Write the verified edits.")
@click.option("-e", "--entry", help="What to run: 'script.py ARGS', 'python -m pkg.mod ARGS' or 'pytest ARGS'.")
@click.option("--timeout", type=float, help="Seconds one run of the entry may take.")
@click.option("--unsafe-fixes", is_flag=True, default=None, help="Also try fixes that may change behaviour (still verified).")
@click.option("--fullgraph", is_flag=True, help="Aim for zero breaks; then add fullgraph=True where the program compiles, proven by a real run.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def fix(
    paths: tuple[Path, ...], mode: str, entry: str | None, timeout: float | None, unsafe_fixes: bool | None, fullgraph: bool, quiet: bool
) -> None:
    """Run the entry, find its graph breaks in PATHS, and fix them with verified edits (the default command).

    PATHS are the files and folders gbfix may edit (default: the current folder).
    Exit codes: 0 nothing left to fix, 1 breaks found or edits to make, 2 error.
    """
    from gbfix import engine, report  # libcst and the engine: only for this command
    from gbfix.config import find_config
    from gbfix.entry import resolve
    from gbfix.sources import check_paths

    targets = list(paths) or [Path(".")]
    check_paths(targets)  # a missing path is the first thing to say, before the entry
    config = find_config(targets[0])
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


_FORMAT = click.option(
    "--output-format", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)


@cli.command(context_settings=_HELP, short_help="Explain a GB code: registry entry, catalog page, recipes.")
@click.argument("code")
@_FORMAT
def explain(code: str, fmt: str) -> None:
    """Explain a graph break code (GB0170, gb0170 or 170): the installed torch's registry
    entry, and gbfix's catalog page with its recipes and before/after examples. Offline."""
    from gbfix import explain as ex

    e = ex.explain(code)
    click.echo(json.dumps(ex.as_json(e), indent=2) if fmt == "json" else ex.render(e))


@cli.command(context_settings=_HELP, short_help="Static check for likely graph breaks (no torch import).")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_FORMAT
def lint(paths: tuple[Path, ...], fmt: str) -> None:
    """Statically find likely graph breaks in code reached from torch.compile (no torch, nothing run).

    PATHS are files and folders (default: the current folder); include the files that call
    torch.compile. Prints `path:line:col: GBxxxx likely: message`; exit 1 when anything is
    found (syntax errors are reported as E999), 0 when nothing, 2 on errors.
    """
    from gbfix.lint import lint as run_lint

    result = run_lint(list(paths) or [Path(".")])
    if fmt == "json":
        data = {"findings": [f.__dict__ for f in result.findings], "files": result.files, "regions": result.regions}
        click.echo(json.dumps(data, indent=2))
    else:
        for f in result.findings:
            click.echo(f.render())
    click.echo(result.summary(), err=True)
    sys.exit(1 if result.findings else 0)


def main() -> None:
    try:
        cli.main(prog_name="gbfix", standalone_mode=False)  # also under `python -m gbfix`
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
