"""Every user error is one line naming the file or field, exit code 2, and nothing written.

Each bad input goes through the console script's own exit path (``sweeper.cli.main``, in
this process) from a working folder that holds the inputs: a finished study (real SQLite,
a synthetic evaluator), manifests, search spaces and data sets, good and bad. For each
case: stdout is empty, stderr is exactly one line that names the file or field, the exit
code is 2, and no file of the folder is written, changed or removed. No server starts:
starting a process fails the test.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.demo import demo_paths


def _manifest(folder: Path, name: str, **env: str) -> str:
    """The demo manifest written to ``folder/name`` (model and drafter absolute, or as ``env`` says)."""
    demo = demo_paths()
    data = json.loads(demo.manifest.read_text())
    data["env"]["MODEL_ID"] = str(demo.model)
    speculative = json.loads(data["env"]["SPECULATIVE_CONFIG"])
    speculative["model"] = str(demo.drafter)
    data["env"]["SPECULATIVE_CONFIG"] = json.dumps(speculative)
    data["env"].update(env)
    (folder / name).write_text(json.dumps(data, indent=2))
    return name


# a finished study made in a process of its own: its database closed as `sweeper run` leaves it
MAKE_STUDY = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("synthetic_study", sys.argv[1])
synthetic = sys.modules["synthetic_study"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(synthetic)
synthetic.make_study(Path(sys.argv[2]), name="study", configs=[synthetic.CONFIGS["A"]])
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("work")
    synthetic = Path(__file__).parents[1] / "synthetic_study.py"
    subprocess.run([sys.executable, "-c", MAKE_STUDY, str(synthetic), str(folder)], check=True, timeout=300)
    assert sorted(path.name for path in folder.iterdir()) == ["study.db"]
    _manifest(folder, "good.json")
    _manifest(folder, "window-abc.json", SLIDING_WINDOW="abc")
    own = json.loads((folder / "window-abc.json").read_text())
    own["serve"] = ["python", "serve.py"]  # its own server reads the env: the search space types the value
    (folder / "own-serve.json").write_text(json.dumps(own))
    own["env"]["MODEL_ID"] = "model"  # no such folder here: no preset fits, and the line says why
    (folder / "own-copied.json").write_text(json.dumps(own))
    _manifest(folder, "spec-broken.json", SPECULATIVE_CONFIG='{"method": "mtp", "model": ')
    _manifest(folder, "no-drafter.json", SPECULATIVE_CONFIG=json.dumps({"method": "mtp", "model": "drafter"}))
    copied = folder / "copied"
    copied.mkdir()
    (copied / "manifest.json").write_text(demo_paths().manifest.read_text())  # away from its model folder
    (folder / "notes.txt").write_text("not a database\n")
    (folder / "empty.db").write_bytes(b"")
    (folder / "sub").mkdir()
    (folder / "broken.yaml").write_text("name: broken\nparameters:\n  - name: [x\n")
    (folder / "prompts.json").write_text('[{"id": "a", "prompt": "hi"},\n {oops}]\n')
    (folder / "ppl.jsonl").write_text('{"id": "a", "text": "hi"}\n{"id": "b", "text": \n')
    (folder / "not-json.json").write_text("{name: 1}\n")
    return folder


def _files(folder: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under ``folder``: (size, mtime in ns) of a file, None for a folder."""
    found: dict[str, tuple[int, int] | None] = {}
    for path in sorted(folder.rglob("*")):
        stat = path.stat()
        found[str(path.relative_to(folder))] = None if path.is_dir() else (stat.st_size, stat.st_mtime_ns)
    return found


def _no_process(*args, **kwargs):
    raise AssertionError(f"a bad input started a process: {args[0] if args else kwargs.get('args')!r}")


def _sweeper(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """The console script in this process: (exit code, stdout, stderr), its log lines included."""
    monkeypatch.setattr(sys, "argv", ["sweeper", *args])
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    root.handlers = []  # pytest's own: without them the command's basicConfig logs to stderr, as in a shell
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:
        code = 0
    finally:
        root.handlers, root.level = handlers, level
    out, err = capsys.readouterr()
    return code, out, err


DEMO = demo_paths()

# (command line, what its one line names); run from the working folder
CASES = [
    # the issue's: a knob value of the wrong type, storage URLs, a trial, a space, missing folders
    (["import", "--space", "tiny-cpu", "window-abc.json"], "window-abc.json: field 'env.SLIDING_WINDOW': must be an"),
    (
        ["import", "--space", "tiny-cpu", "own-serve.json"],
        "own-serve.json: field 'env.SLIDING_WINDOW': 'abc' is not an",
    ),
    (["status", "--storage", "sqlite:///"], "'sqlite:///' names no database file"),
    (["status", "--storage", "sqlite://"], "'sqlite://' names no database file"),
    (["report", "--storage", "sqlite:///", "-o", "report"], "'sqlite:///' names no database file"),
    (["status", "--storage", "notes.txt"], "notes.txt is not a SQLite database"),
    (["status", "--storage", "mysqlx://u@h/db"], "unknown kind of database 'mysqlx'"),
    (["status", "--storage", "study.db", "--trial", "99"], "--trial 99: study 'study' has no such trial (trials 0 to"),
    (["import", "--space", "broken.yaml", "good.json"], "broken.yaml: not valid YAML (line 4, column 1"),
    (["import", "copied/manifest.json"], "field 'env.MODEL_ID': the model folder 'model' is missing"),
    (["import", "spec-broken.json"], "spec-broken.json: field 'env.SPECULATIVE_CONFIG': is not valid JSON"),
    (
        ["import", "own-copied.json"],
        "no preset fits its model 'model' (env.MODEL_ID: the model folder 'model' is missing",
    ),
    (["import", "no-drafter.json"], "field 'env.SPECULATIVE_CONFIG.model': the drafter folder 'drafter' is missing"),
    # storage that is not a study database, read by each command that reads one
    (["status", "--storage", "sqlite:///new.db"], "no study database at"),
    (["status", "--storage", "empty.db"], "empty.db holds no study (see --storage)"),
    (["status", "--storage", "sub"], "sub is a folder, not a study database file"),
    (["export", "--storage", "notes.txt"], "notes.txt is not a SQLite database"),
    (["verify", "--storage", "missing.db"], "no study database at"),
    (["status", "--storage", "study.db", "--study", "other"], "no study named 'other'"),
    (["run", "--storage", "nowhere/study.db"], "no folder"),
    # bad option values and data sets, before anything starts
    (["run", "--gpus", "x,y"], "--gpus 'x,y'"),
    (["run", "--timeout", "soon"], "--timeout"),
    (["run", "--prompts", "prompts.json", "--heldout-fraction", "0.25"], "prompts.json: not valid JSON (line 2"),
    (["run", "--ppl-data", "ppl.jsonl", "--heldout-fraction", "0.25"], "ppl.jsonl: line 2 is not valid JSON"),
    (["run", "--manifest", "window-abc.json", "--space", "tiny-cpu"], "field 'env.SLIDING_WINDOW'"),
    (["eval", "good.json", "--set", "SLIDING_WINDOW=abc"], "good.json: field 'env.SLIDING_WINDOW': must be an integer"),
    (["eval", "good.json", "--set", "ENFORCE_EAGER=maybe"], "field 'env.ENFORCE_EAGER'"),
    (["eval", "good.json", "--fidelity", "missing.json"], "missing.json: no such file"),
    (["eval", "good.json", "--ready-timeout", "-1"], "ready_timeout"),
    (["serve", "good.json", "--set", "PORT=x", "--print-command"], "field 'env.PORT'"),
    (["serve", "copied/manifest.json", "--print-command"], "the model folder 'model' is missing"),
    (["rerun", "missing.json", "--base", "good.json"], "missing.json: no such file"),
    (["rerun", "good.json", "--base", "good.json", "--pairs", "0"], "pairs must be a whole number"),
    (["ablate", "good.json", "--prompts", "prompts.json"], "prompts.json: not valid JSON"),
    (["env", "not-json.json"], "not-json.json: not valid JSON"),
    (["import", "--space", "nosuch.yaml", "good.json"], "nosuch.yaml: no such file"),
    (["status", "--trial", "abc"], "'--trial'"),
    (["demo", "info", "--bogus"], "--bogus"),
]


@pytest.mark.parametrize(("args", "named"), CASES, ids=[" ".join(args) for args, _ in CASES])
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(workdir, monkeypatch, capsys, args, named) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    before = _files(workdir)
    code, out, err = _sweeper(monkeypatch, capsys, *args)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert named in err, err
    assert _files(workdir) == before


def test_a_postgresql_url_without_its_driver_names_the_extra(workdir, monkeypatch, capsys) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were not installed
    before = _files(workdir)
    code, out, err = _sweeper(monkeypatch, capsys, "status", "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    distribution = packages_distributions()["storage"][0]  # the installed distribution, whatever its name
    assert err.startswith("error: cannot use study database postgresql://u:***@127.0.0.1:1/db: ")
    assert f"pip install '{distribution}[postgres]'" in err and "secret" not in err
    assert _files(workdir) == before


def test_the_console_script_itself_exits_2_with_one_line(workdir) -> None:
    # the installed entry point, in a process of its own: no traceback, nothing created
    done = subprocess.run(
        [sys.executable, "-c", "from sweeper.cli import main; main()", "status", "--storage", "sqlite:///"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, "SWEEPER_DEBUG": "0"},
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and "names no database file" in done.stderr, done.stderr


def test_reading_a_good_study_leaves_its_database_as_it_was(workdir, monkeypatch, capsys) -> None:
    # the reading commands of the cases above do open this database: they must not write it
    monkeypatch.chdir(workdir)
    before = _files(workdir)
    code, out, err = _sweeper(monkeypatch, capsys, "status", "--storage", "study.db", "--trial", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["number"] == 0
    assert _files(workdir) == before
