"""The flag forms of ``biasim analyze`` before its subcommands (``analyze RUN_DIR``,
``--decisions F``, ``--texts F``, ``--texts F --masked-lm M``, ``--iat P``), kept for one
release: each is rewritten into its subcommand, with one deprecation line on stderr naming the
new form. Nothing here analyses anything; the subcommands are the one implementation."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import typer.core

from biasim.simulator.cli.common import err_console, styled

#: The options whose presence chose a mode, each replaced by its subcommand and a positional.
_MODE_OPTIONS = ("--iat", "--texts", "--decisions")


@dataclass(frozen=True)
class LegacyCall:
    """An old flag form rewritten: the subcommand's arguments and the deprecation line."""

    args: list[str]
    old: str
    new: str
    ignored: list[str]

    @property
    def message(self) -> str:
        line = f"`{self.old}` is deprecated; use `{self.new}`"
        if self.ignored:
            line += f" ({', '.join(self.ignored)}: not an option of it, ignored)"
        return line


def _take_values(args: list[str], option: str) -> tuple[list[str], list[str]]:
    """The values of every ``option V`` / ``option=V`` in ``args``, and ``args`` without them."""
    values: list[str] = []
    rest: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == option:
            values.append(next(tokens, ""))
        elif token.startswith(option + "="):
            values.append(token.split("=", 1)[1])
        else:
            rest.append(token)
    return values, rest


def _mode(args: list[str]) -> tuple[str, list[str], list[str], str]:
    """The subcommand an old call meant, its positionals, the other arguments, and the old
    form's words for the deprecation line (as the old command chose: --iat, then --texts with
    or without --masked-lm, then --decisions, else a run directory)."""
    for option in _MODE_OPTIONS:
        values, rest = _take_values(args, option)
        if not values:
            continue
        if option == "--texts" and any(
            a == "--masked-lm" or a.startswith("--masked-lm=") for a in rest
        ):
            return "prism", values[-1:], rest, f"{option} {shlex.join(values[-1:])} --masked-lm M"
        # The old command read one --texts / --decisions (the last given) and every --iat.
        kept = values if option == "--iat" else values[-1:]
        old = " ".join(f"{option} {shlex.quote(v)}" for v in kept)
        return option.removeprefix("--"), kept, rest, old
    return "run", [], args, "RUN_DIR"


def _drop_foreign(
    args: list[str], own: Any, everyone: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """``args`` without the options of another subcommand (the old command accepted and ignored
    them), and their names. An option no subcommand has stays, so it is refused (exit 2)."""
    mine = {name for p in own.params for name in (*p.opts, *p.secondary_opts)}
    kept: list[str] = []
    ignored: list[str] = []
    tokens = iter(args)
    for token in tokens:
        name = token.split("=", 1)[0]
        option = everyone.get(name)
        if option is None or name in mine:
            kept.append(token)
            continue
        ignored.append(name)
        if not option.is_flag and "=" not in token:
            next(tokens, None)
    return kept, ignored


def rewrite(args: list[str], commands: dict[str, Any]) -> LegacyCall:
    """An old flag form of ``biasim analyze`` as its subcommand's arguments."""
    command, positionals, rest, old_words = _mode(args)
    everyone = {
        name: p
        for c in commands.values()
        for p in c.params
        if p.param_type_name == "option"
        for name in (*p.opts, *p.secondary_opts)
    }
    rest, ignored = _drop_foreign(rest, commands[command], everyone)
    if command == "prism":
        new_words = f"prism {shlex.join(positionals)} --masked-lm M"
    elif command == "run":
        new_words = "run RUN_DIR"
    else:
        new_words = f"{command} {shlex.join(positionals)}"
    return LegacyCall(
        [command, *positionals, *rest],
        f"biasim analyze {old_words}",
        f"biasim analyze {new_words}",
        ignored,
    )


class AnalyzeGroup(typer.core.TyperGroup):
    """``biasim analyze``'s subcommands, and the old flag forms rewritten into them."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        first = args[0] if args else None
        if first is not None and first not in self.commands and first not in ctx.help_option_names:
            call = rewrite(args, self.commands)
            err_console.print(
                styled("deprecated", "yellow", f": {call.message}"),
                highlight=False,
                soft_wrap=True,
            )
            args = call.args
        return super().parse_args(ctx, args)
