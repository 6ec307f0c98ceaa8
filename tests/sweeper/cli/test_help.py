"""Every command's --help: each option described in at most 4 lines as click prints it at 80
columns, and the options several commands share (--storage, --study) declared once, so that
they read the same everywhere."""

from __future__ import annotations

import importlib
import re

import click
import pytest

from sweeper.cli import COMMAND_MODULES, app

WIDTH, MOST_LINES = 80, 4


def commands() -> list[tuple[str, click.Command]]:
    """Every command, a group's subcommands as ``group sub``."""
    found = []
    for name, module in sorted(COMMAND_MODULES.items()):
        command = importlib.import_module(module).command
        found.append((name, command))
        if isinstance(command, click.Group):
            found += [(f"{name} {sub}", command.commands[sub]) for sub in sorted(command.commands)]
    return found


def option_entries(name: str, command: click.Command) -> dict[str, list[str]]:
    """The lines of each option's entry in ``sweeper NAME --help`` at WIDTH columns, by option."""
    root = click.Context(app, info_name="sweeper", terminal_width=WIDTH, max_content_width=WIDTH)
    context = click.Context(command, info_name=name, parent=root, terminal_width=WIDTH, max_content_width=WIDTH)
    text = command.get_help(context)
    lines = text.split("Options:\n", 1)[1].splitlines()
    entries: dict[str, list[str]] = {}
    current = None
    for line in lines:
        found = re.match(r"^  (-[\w-]+|--[\w-]+)", line)
        if found:
            current = found.group(1)
            entries[current] = [line]
        elif current is not None and line.strip():
            entries[current].append(line)
    return entries


@pytest.mark.parametrize(("name", "command"), commands(), ids=[name for name, _ in commands()])
def test_every_option_is_described_in_at_most_four_lines(name: str, command: click.Command) -> None:
    entries = option_entries(name, command)
    shown = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    for option in shown:
        assert option.help and option.help.strip(), f"sweeper {name} {option.opts[0]} has no help"
        entry = entries[option.opts[0]]
        assert len(entry) <= MOST_LINES, (f"sweeper {name} {option.opts[0]}", entry)
        assert all(len(line) <= WIDTH for line in entry), entry


def test_storage_and_study_read_the_same_in_every_command() -> None:
    storage = {}
    study = {}
    for name, command in commands():
        for option in command.params:
            if "--storage" in getattr(option, "opts", ()):
                storage[name] = (option.help, option.envvar, option.metavar)
            if "--study" in getattr(option, "opts", ()):
                study[name] = option.metavar
    assert sorted(storage) == ["ablate", "export", "report", "run", "status", "verify"]
    assert len(set(storage.values())) == 1, storage
    help_text, envvar, metavar = next(iter(storage.values()))
    assert envvar == "SWEEPER_STORAGE" and "SWEEPER_STORAGE" in help_text and metavar == "URL"
    assert sorted(study) == ["export", "report", "run", "status", "verify"]
    assert set(study.values()) == {"NAME"}, study
