"""The challenge's manifest.json: load, validate, render with overrides, save.

A manifest is the unit the challenge harness runs::

    {"name", "description", "dependencies": [...], "model_id",
     "served_model_name", "port", "serve": [...], "env": {...}}

``serve`` runs from the manifest's folder with ``env`` added to the
environment. Fields the harness does not define are kept as they are, so a
manifest that is loaded, rendered and saved loses nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeper.errors import ManifestError

logger = logging.getLogger(__name__)

KNOWN_FIELDS = (
    "name",
    "description",
    "dependencies",
    "model_id",
    "served_model_name",
    "port",
    "serve",
    "env",
)

# Commands that ServerProcess runs with the interpreter of this environment,
# so that a manifest saying ["sweeper", "serve", ...] or ["python", ...] works
# whether or not the virtual environment is on PATH.
INTERPRETER_COMMANDS = {"python", "python3"}
SWEEPER_COMMAND = "sweeper"
# a Hugging Face hub id (org/name): a model value of this form that is no local path is the hub's
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Manifest:
    """One challenge manifest. ``source`` is where it was read from (not compared)."""

    name: str
    serve: tuple[str, ...]
    description: str = ""
    dependencies: tuple[str, ...] = ()
    model_id: str = ""
    served_model_name: str = ""
    port: int = 8000
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source: Path | None = dataclasses.field(default=None, compare=False)
    # the interpreter that runs a ``python ...`` serve command (None: this one); a local
    # setting of this machine (``--server-python``), never saved with the manifest
    server_python: str | None = dataclasses.field(default=None, compare=False)

    # -- construction -----------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Manifest:
        """Read and validate a manifest file; raise ManifestError naming the field."""
        path = Path(path)
        label = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ManifestError(label, None, "no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(label, None, f"cannot be read ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError(
                label, None, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        return cls.from_dict(data, source=path.resolve())

    @classmethod
    def from_dict(cls, data: Any, *, source: Path | None = None) -> Manifest:
        label = str(source) if source else "<manifest>"
        if not isinstance(data, dict):
            raise ManifestError(label, None, f"must be a JSON object, not {type(data).__name__}")
        if "serve" not in data:
            raise ManifestError(label, "serve", "is missing (the command that starts the server)")
        serve = data["serve"]
        if not isinstance(serve, list) or not serve or not all(isinstance(part, str) and part for part in serve):
            raise ManifestError(label, "serve", "must be a non-empty list of non-empty strings")
        for key in ("name", "description", "model_id", "served_model_name"):
            if key in data and not isinstance(data[key], str):
                raise ManifestError(label, key, f"must be a string, not {_json_type(data[key])}")
        name = data.get("name", "")
        if not name:
            raise ManifestError(label, "name", "is missing or empty")
        dependencies = data.get("dependencies", [])
        if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
            raise ManifestError(label, "dependencies", "must be a list of strings")
        port = data.get("port", 8000)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ManifestError(label, "port", f"must be an integer from 1 to 65535, not {port!r}")
        env = data.get("env", {})
        if not isinstance(env, dict):
            raise ManifestError(label, "env", f"must be an object, not {_json_type(env)}")
        for key, value in env.items():
            if not isinstance(value, str):
                raise ManifestError(label, f"env.{key}", f"must be a string, not {_json_type(value)} ({value!r})")
        manifest = cls(
            name=name,
            serve=tuple(serve),
            description=data.get("description", ""),
            dependencies=tuple(dependencies),
            model_id=data.get("model_id", ""),
            served_model_name=data.get("served_model_name", ""),
            port=port,
            env=dict(env),
            extra={k: v for k, v in data.items() if k not in KNOWN_FIELDS},
            source=source,
        )
        manifest.resolve_serve_command()  # a command that does not exist is an input error
        return manifest

    # -- use ----------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """The folder ``serve`` runs from: the manifest's own folder."""
        return self.source.parent if self.source else Path.cwd()

    def resolve_serve_command(self) -> list[str]:
        """The serve command as it will be executed, or ManifestError if it cannot be found."""
        head, *rest = self.serve
        if head == SWEEPER_COMMAND:
            return [sys.executable, "-m", "sweeper", *rest]
        if head in INTERPRETER_COMMANDS:
            return [self.server_python or sys.executable, *rest]
        if os.sep in head:
            candidate = Path(head) if os.path.isabs(head) else self.folder / head
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return [str(candidate), *rest]
        elif shutil.which(head):
            return [head, *rest]
        raise ManifestError(str(self.source or "<manifest>"), "serve", f"command {head!r} does not exist")

    def check_local_models(self, overrides: Mapping[str, str] | None = None) -> None:
        """ManifestError naming a model or drafter folder that is missing.

        ``MODEL_ID`` (else ``model_id``) and the ``model`` of ``SPECULATIVE_CONFIG``
        (the drafter) name a path, relative to the manifest's folder, or a hub id
        (``org/name``); a value that is neither an existing path nor a hub id is a
        folder that is missing. A ``SPECULATIVE_CONFIG`` that is not a JSON object
        is named too. ``overrides``: env values that win over the manifest's (``--set``).
        """
        env = {**self.env, **(overrides or {})}
        label = str(self.source or "<manifest>")
        model, field = (env["MODEL_ID"], "env.MODEL_ID") if env.get("MODEL_ID") else (self.model_id, "model_id")
        if model:
            self._check_local_model(model, label, field, "model")
        raw = env.get("SPECULATIVE_CONFIG")
        if not raw:
            return
        try:
            config = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ManifestError(
                label, "env.SPECULATIVE_CONFIG", f"is not valid JSON ({exc.msg}, column {exc.colno})"
            ) from None
        if not isinstance(config, dict):
            raise ManifestError(label, "env.SPECULATIVE_CONFIG", f"must be a JSON object, not {_json_type(config)}")
        drafter = config.get("model")
        if isinstance(drafter, str) and drafter:
            self._check_local_model(drafter, label, "env.SPECULATIVE_CONFIG.model", "drafter")

    def _check_local_model(self, value: str, label: str, field: str, what: str) -> None:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else self.folder / path
        if path.exists() or HUB_ID.fullmatch(value):
            return
        raise ManifestError(
            label,
            field,
            f"the {what} folder {value!r} is missing ({path} does not exist): copy it beside the "
            "manifest, or give its path or a hub id (org/name)",
        )

    def with_server_python(self, python: str | os.PathLike[str] | None) -> Manifest:
        """A copy whose ``python ...`` serve command runs with ``python`` (None: this one).

        ManifestError when it is not an executable file. A ``sweeper ...`` serve
        command keeps running with this interpreter (where sweeper is installed).
        """
        if python is None:
            return dataclasses.replace(self, server_python=None)
        path = Path(python).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ManifestError(str(python), None, "is not an executable Python interpreter")
        if self.serve[0] not in INTERPRETER_COMMANDS:
            logger.warning(
                "%s: the serve command starts with %r, not python: the server python %s is not used",
                self.source or self.name,
                self.serve[0],
                path,
            )
        return dataclasses.replace(self, server_python=str(path.absolute()))

    def get(self, key: str, default: str = "") -> str:
        """An env value, falling back to the top-level field of the same name."""
        if key in self.env:
            return self.env[key]
        field = key.lower()
        if field in ("model_id", "served_model_name") and getattr(self, field):
            return getattr(self, field)
        if field == "port":
            return str(self.port)
        return default

    def render(self, overrides: Mapping[str, str] | None = None, **fields: Any) -> Manifest:
        """A copy with env overrides applied (PORT also sets ``port``) and fields replaced."""
        env = dict(self.env)
        for key, value in (overrides or {}).items():
            if not isinstance(value, str):
                raise ManifestError(
                    str(self.source or "<manifest>"),
                    f"env.{key}",
                    f"override must be a string, not {type(value).__name__}",
                )
            env[key] = value
        if "PORT" in (overrides or {}) and "port" not in fields:
            try:
                fields["port"] = int(env["PORT"])
            except ValueError:
                raise ManifestError(str(self.source or "<manifest>"), "env.PORT", "must be an integer") from None
        return dataclasses.replace(self, env=env, **fields)

    def redacted(self) -> Manifest:
        """A copy whose secret-looking env values (tokens, keys, passwords) are removed.

        Used for everything sweeper stores, logs, reports or exports.
        """
        env = {key: value for key, value in self.env.items() if not is_secret_name(key)}
        return dataclasses.replace(self, env=env)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "dependencies": list(self.dependencies),
            "model_id": self.model_id,
            "served_model_name": self.served_model_name,
            "port": self.port,
            "serve": list(self.serve),
            "env": dict(self.env),
        }
        data.update(self.extra)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically: the file is either the old one or the whole new one.

        Its mode is the one a plain ``open`` gives (0644 under the usual umask 022), or the
        replaced file's own; the temporary file it is written as would be 0600.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0o022)  # read the umask: os.umask sets and returns it
            os.umask(umask)
            mode = 0o666 & ~umask
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                os.fchmod(out.fileno(), mode)
                out.write(self.to_json())
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        logger.info("wrote manifest %s", path)
        return path


SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "CREDENTIAL", "AUTH")


def is_secret_name(name: str) -> bool:
    """Does an env variable's name say it holds a secret (HF_TOKEN, AWS_SECRET_ACCESS_KEY...)?"""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) or upper.endswith("_KEY")


def parse_assignments(items: list[str] | tuple[str, ...], *, option: str = "--set") -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings (``--set`` options) into a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ManifestError(option, None, f"expected KEY=VALUE, got {item!r}")
        result[key] = value
    return result


def _json_type(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
        str: "a string",
    }.get(type(value), type(value).__name__)
