"""The ``sweeper`` command line: thin commands over the orchestration layer.

Every command lives in its own module here and is listed once in
``COMMAND_MODULES``. Commands check input, call ``sweeper.*`` and display;
an error raised on purpose (sweeper's own or a lower package's: the roots
in ``sweeper.errors.ERROR_ROOTS``) becomes one line on stderr and its exit
code, and so does a bad option or argument (click's usage error, exit code 2).
"""

from sweeper.cli._app import COMMAND_MODULES, app, main

__all__ = ["COMMAND_MODULES", "app", "main"]
