"""Every command sweeper suggests is printed the way the user can run it here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sweeper import invocation


def test_the_program_is_printed_as_it_can_be_typed(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    program = venv_bin / "sweeper"
    program.write_text("#!/bin/sh\n")
    # on PATH as this same program: its name; not on PATH (the README's .venv/bin/sweeper run): as typed
    assert invocation.program_from(str(program), path_lookup=str(program)) == "sweeper"
    assert invocation.program_from(".venv/bin/sweeper", path_lookup=None) == ".venv/bin/sweeper"
    assert invocation.program_from(".venv/bin/sweeper", path_lookup="/usr/bin/sweeper") == ".venv/bin/sweeper"
    assert invocation.program_from("sweeper", path_lookup=str(program)) == "sweeper"
    # python -m sweeper: the name where PATH's sweeper is this environment's, else this interpreter -m
    python = str(venv_bin / "python")
    assert invocation.program_from("/x/sweeper/__main__.py", path_lookup=str(program), executable=python) == "sweeper"
    assert (
        invocation.program_from("/x/sweeper/__main__.py", path_lookup=None, executable=python) == f"{python} -m sweeper"
    )


def test_a_hint_printed_by_the_console_script_runs_as_printed(tmp_path: Path) -> None:
    # run as the README runs it: by its path, with no sweeper on PATH
    script = Path(sys.executable).with_name("sweeper")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(script), "status", "--storage", f"sqlite:///{tmp_path / 'none.db'}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    invocation.set_program(invocation.program_from(str(script), path_lookup=None))
    try:
        hint = invocation.command("verify --study x")
        assert hint == f"{script} verify --study x"
        assert subprocess.run([*hint.split()[:1], "--help"], capture_output=True, env=env, check=False).returncode == 0
    finally:
        invocation.set_program(invocation.PROGRAM_NAME)
