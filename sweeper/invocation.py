"""How the user runs sweeper, so that every command sweeper suggests works as typed.

``bash scripts/setup.sh && .venv/bin/sweeper run`` leaves ``sweeper`` off the
shell's ``PATH``; a hint that says ``sweeper verify`` would then fail. The
command line sets ``PROGRAM`` once, from how it was started
(``program_from``), and every hint is written with ``command(...)``:
``sweeper verify ...`` where ``sweeper`` on ``PATH`` is this program,
``.venv/bin/sweeper verify ...`` (the path as the user typed it) where it is not.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

PROGRAM_NAME = "sweeper"
_program = PROGRAM_NAME


def program_from(argv0: str, *, path_lookup: str | None = None, executable: str = sys.executable) -> str:
    """What to print for ``sweeper``: the name where ``PATH`` finds this same program, else the
    path the user typed (``argv0``); run as ``python -m sweeper``, the name where ``PATH``'s
    ``sweeper`` belongs to this interpreter's environment, else ``<this python> -m sweeper``."""
    found = path_lookup if path_lookup is not None else shutil.which(PROGRAM_NAME)
    if os.path.basename(argv0) in ("__main__.py", "-m", "-c"):
        if found and os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(executable)):
            return PROGRAM_NAME
        return f"{shlex.quote(executable)} -m sweeper"
    if os.sep not in argv0:
        return PROGRAM_NAME
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return PROGRAM_NAME
    return argv0


def set_program(program: str) -> None:
    global _program
    _program = program


def command(words: str) -> str:
    """``sweeper WORDS`` as the user can run it here (``command("verify --study x")``)."""
    return f"{_program} {words}"
