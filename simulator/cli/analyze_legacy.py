"""The flag forms of ``biasim analyze`` before its subcommands (``analyze RUN_DIR``,
``--decisions F``, ``--texts F``, ``--texts F --masked-lm M``, ``--iat P``), kept for one
release: each is rewritten into its subcommand, with one deprecation line on stderr naming the
new form. A run directory named like a subcommand (``analyze run``, ``./run`` being the run)
still works as the old form did. Two analyses at once (``RUN_DIR --decisions F``, ``--decisions F
--texts G``), which the old command settled by silently ignoring one, are refused with both
new forms named. Nothing here analyses anything; the subcommands are the one implementation."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import typer.core

from biasim.simulator.cli.common import err_console, fail_input, styled
from biasim.simulator.common.errors import InputError

#: The options whose presence chose a mode, each replaced by its subcommand and a positional.
_MODE_OPTIONS = ("--iat", "--texts", "--decisions")


@dataclasses.dataclass(frozen=True)
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


def _mode(args: list[str], everyone: dict[str, Any]) -> tuple[str, list[str], list[str], str]:
    """The subcommand an old call meant, its positionals, the other arguments, and the old
    form's words for the deprecation line: --iat, --texts (with --masked-lm: PRISM),
    --decisions, else a run directory.

    Raises:
        InputError: Two of those at once (the old command used one and ignored the other
            without a word): the message names both and their new forms.
    """
    given = []
    for option in _MODE_OPTIONS:
        values, rest = _take_values(args, option)
        if values:
            given.append((option, values, rest))
    run_dirs = _positionals(args, everyone)
    if len(given) > 1 or (given and run_dirs):
        chosen = [_new_form(option, values, rest) for option, values, rest in given]
        chosen += [f"biasim analyze run {shlex.quote(d)}" for d in run_dirs[:1]]
        named = [option for option, _, _ in given] + ["RUN_DIR"] * bool(run_dirs)
        raise InputError(
            f"{' and '.join(named)} ask for different analyses; give one: "
            + " or ".join(f"`{c}`" for c in chosen)
        )
    if not given:
        return "run", [], args, "RUN_DIR"
    option, values, rest = given[0]
    if option == "--texts" and _has_masked_lm(rest):
        return "prism", values[-1:], rest, f"{option} {shlex.join(values[-1:])} --masked-lm M"
    # The old command read one --texts / --decisions (the last given) and every --iat.
    kept = values if option == "--iat" else values[-1:]
    old = " ".join(f"{option} {shlex.quote(v)}" for v in kept)
    return option.removeprefix("--"), kept, rest, old


def _has_masked_lm(args: list[str]) -> bool:
    return any(a == "--masked-lm" or a.startswith("--masked-lm=") for a in args)


def _new_form(option: str, values: list[str], rest: list[str]) -> str:
    """The subcommand form of one mode option, for a message."""
    if option == "--texts" and _has_masked_lm(rest):
        return f"biasim analyze prism {shlex.quote(values[-1])} --masked-lm M"
    kept = values if option == "--iat" else values[-1:]
    return f"biasim analyze {option.removeprefix('--')} {shlex.join(kept)}"


def _positionals(args: list[str], everyone: dict[str, Any]) -> list[str]:
    """The arguments of ``args`` that are neither an option nor an option's value."""
    found: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            found += list(tokens)
        elif not token.startswith("-") or token == "-":
            found.append(token)
        elif "=" not in token and token in (*_MODE_OPTIONS, *everyone):
            option = everyone.get(token)
            if option is None or not option.is_flag:
                next(tokens, None)
    return found


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


def _options(commands: dict[str, Any]) -> dict[str, Any]:
    """Every option of every subcommand by each of its names."""
    return {
        name: p
        for c in commands.values()
        for p in c.params
        if p.param_type_name == "option"
        for name in (*p.opts, *p.secondary_opts)
    }


def rewrite(args: list[str], commands: dict[str, Any]) -> LegacyCall:
    """An old flag form of ``biasim analyze`` as its subcommand's arguments.

    Raises:
        InputError: It gives two analyses at once (see :func:`_mode`).
    """
    everyone = _options(commands)
    command, positionals, rest, old_words = _mode(args, everyone)
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


def run_dir_named_like(args: list[str], commands: dict[str, Any]) -> LegacyCall | None:
    """The old form ``analyze DIR`` where ``DIR`` is also a subcommand's name (a run directory
    called ``run``): an existing directory, followed by no argument the subcommand could take
    as its own positional. ``None`` when the call reads as the subcommand.

    Raises:
        InputError: It also gives another analysis (``analyze run --decisions F``).
    """
    name, rest = args[0], args[1:]
    if not Path(name).is_dir() or _positionals(rest, _options(commands)):
        return None
    where = f"./{name}"
    call = rewrite([where, *rest], commands)
    return dataclasses.replace(
        call, old=f"biasim analyze {name}", new=f"biasim analyze run {where}"
    )


class AnalyzeGroup(typer.core.TyperGroup):
    """``biasim analyze``'s subcommands, and the old flag forms rewritten into them."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        first = args[0] if args else None
        helps = set(ctx.help_option_names)
        call = None
        try:
            if first in self.commands:
                call = None if helps.intersection(args) else run_dir_named_like(args, self.commands)
            elif first is not None and first not in helps:
                call = rewrite(args, self.commands)
        except InputError as exc:
            fail_input(exc)
        if call is not None:
            err_console.print(
                styled("deprecated", "yellow", f": {call.message}"),
                highlight=False,
                soft_wrap=True,
            )
            args = call.args
        return super().parse_args(ctx, args)
