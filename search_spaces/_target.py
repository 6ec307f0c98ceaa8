"""How a parameter's value reaches the server: a manifest env variable.

A target is one of three shapes:

* ``env: NAME``: the variable holds the value itself (``"188"``);
* ``env: NAME`` + ``json_path: a.b``: the variable holds a JSON object and
  the value is written at that key path, keeping everything else in it
  (the drafter's ``model`` in ``SPECULATIVE_CONFIG``, for example);
* ``env: NAME`` + ``template: '...'``: the variable's whole value is rendered
  from a ``string.Template`` over ``$value`` and the other parameters' names.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import string
from collections.abc import Mapping, MutableMapping
from typing import Any

from search_spaces.errors import SearchSpaceError

logger = logging.getLogger(__name__)

MISSING: Any = object()  # what EnvTarget.read returns for a value the env does not hold


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvTarget:
    """One manifest env variable that a parameter writes."""

    env: str
    json_path: tuple[str, ...] = ()
    template: str | None = None
    # json_path only: start from {} when the base manifest lacks the variable
    create: bool = False
    # write only when the base manifest already sets the variable
    if_present: bool = False

    def describe(self) -> str:
        if self.json_path:
            return f"{self.env}.{'.'.join(self.json_path)}"
        return self.env

    # -- reading the base manifest ------------------------------------------

    def read(self, env: Mapping[str, str]) -> Any:
        """The value this target holds in ``env``, or MISSING (templates cannot be read back)."""
        if self.template is not None or self.env not in env:
            return MISSING
        raw = env[self.env]
        if not self.json_path:
            return raw
        try:
            node: Any = json.loads(raw)
        except json.JSONDecodeError:
            return MISSING
        for key in self.json_path:
            if not isinstance(node, dict) or key not in node:
                return MISSING
            node = node[key]
        return node

    def check_base(self, env: Mapping[str, str], where: str) -> str | None:
        """Why ``env`` cannot take this target (None when it can)."""
        present = bool(env.get(self.env))
        if self.if_present or self.template is not None:
            return None
        if not self.json_path:
            return None
        if not present:
            if self.create:
                return None
            return f"{where} writes {self.describe()}, but the base manifest has no {self.env} to write it into"
        try:
            node = json.loads(env[self.env])
        except json.JSONDecodeError as exc:
            return f"{where} writes {self.describe()}, but {self.env} is not valid JSON ({exc.msg})"
        for key in self.json_path[:-1]:
            if not isinstance(node, dict):
                break
            node = node.get(key, {})
        if not isinstance(node, dict):
            return f"{where} writes {self.describe()}, but that path does not hold a JSON object"
        return None

    # -- writing --------------------------------------------------------------

    def apply(
        self,
        env: MutableMapping[str, str],
        base: Mapping[str, str],
        value: Any,
        params: Mapping[str, Any],
    ) -> None:
        """Write ``value`` into ``env`` (the working copy of ``base``)."""
        if self.if_present and self.env not in base:
            return
        if self.template is not None:
            env[self.env] = render_template(self.template, value, params)
            return
        if not self.json_path:
            env[self.env] = format_scalar(value)
            return
        raw = env.get(self.env, "")
        document = json.loads(raw) if raw else {}
        node = document
        for key in self.json_path[:-1]:
            node = node.setdefault(key, {})
        node[self.json_path[-1]] = value
        env[self.env] = json.dumps(document, separators=(",", ":"))


def format_scalar(value: Any) -> str:
    """How a value is written into a plain env variable."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def render_template(template: str, value: Any, params: Mapping[str, Any]) -> str:
    """Render ``template`` with ``$value`` and the other parameters (JSON-encoded non-strings)."""
    mapping = {name: _template_text(v) for name, v in params.items()}
    mapping["value"] = _template_text(value)
    return string.Template(template).substitute(mapping)


def _template_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def check_template(template: str, samples: Mapping[str, Any], value: Any, where: str) -> None:
    """Raise SearchSpaceError if ``template`` names an unknown placeholder or renders bad JSON."""
    try:
        rendered = render_template(template, value, samples)
    except KeyError as exc:
        raise SearchSpaceError(
            f"{where}: template refers to ${{{exc.args[0]}}}, which is neither $value nor a "
            f"parameter (known: {', '.join(sorted(samples)) or 'none'})"
        ) from None
    except ValueError as exc:
        raise SearchSpaceError(f"{where}: template does not render ({exc})") from None
    if rendered.lstrip().startswith(("{", "[")):
        try:
            json.loads(rendered)
        except json.JSONDecodeError as exc:
            raise SearchSpaceError(
                f"{where}: template renders invalid JSON for value {value!r} "
                f"({exc.msg} at column {exc.colno}): {rendered}"
            ) from None
