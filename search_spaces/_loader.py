"""Read search-space files (YAML or TOML) and presets, with errors that name the bad key."""

from __future__ import annotations

import difflib
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from search_spaces._parameter import Condition, Parameter
from search_spaces._space import BASELINE, EnqueuedConfig, SearchSpace
from search_spaces._target import EnvTarget, check_template
from search_spaces.errors import SearchSpaceError

logger = logging.getLogger(__name__)

PRESETS_DIR = Path(__file__).resolve().parent / "presets"

TOP_KEYS = ("name", "description", "parameters", "enqueue")
TARGET_KEYS = ("env", "json_path", "template", "create", "if_present")
PARAMETER_KEYS = (
    "name",
    "type",
    "affects",
    "low",
    "high",
    "step",
    "log",
    "choices",
    "faster",
    "default",
    "resolution",
    "condition",
    "also",
    *TARGET_KEYS,
)
CONDITION_KEYS = ("env_set", "param", "in", "min", "max")
ENQUEUE_KEYS = ("name", "params")


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str) -> SearchSpace:
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise SearchSpaceError(f"no preset {name!r} (presets: {', '.join(preset_names())})")
    return load_space(path)


def load_space(source: str | os.PathLike[str]) -> SearchSpace:
    """A search space from a file path, or from a preset name."""
    path = Path(source)
    if not path.is_file():
        if path.suffix == "" and (PRESETS_DIR / f"{path.name}.yaml").is_file():
            return load_preset(path.name)
        raise SearchSpaceError(f"{source}: no such file, and not a preset (presets: {', '.join(preset_names())})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SearchSpaceError(f"{path}: cannot be read ({exc})") from None
    if path.suffix == ".toml":
        data = _parse_toml(text, path)
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SearchSpaceError(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None
    return space_from_dict(data, source=str(path))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: where (line, column) and what, without the quoted snippet."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None or problem is None:
        return " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {' '.join(str(problem).split())}"


def _parse_toml(text: str, path: Path) -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise SearchSpaceError(f"{path}: TOML needs Python 3.11 or 'tomli'") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SearchSpaceError(f"{path}: not valid TOML ({' '.join(str(exc).split())})") from None


def space_from_dict(data: Any, *, source: str = "<search space>") -> SearchSpace:
    if not isinstance(data, Mapping):
        raise SearchSpaceError(f"{source}: must be a mapping with 'parameters', not {data!r:.60}")
    _check_keys(data, TOP_KEYS, source)
    raw_parameters = data.get("parameters")
    if not isinstance(raw_parameters, list) or not raw_parameters:
        raise SearchSpaceError(f"{source}: 'parameters' must be a non-empty list")
    parameters: list[Parameter] = []
    for index, raw in enumerate(raw_parameters):
        parameter = _parameter(raw, index, source, parameters)
        if parameter.name in {p.name for p in parameters}:
            raise SearchSpaceError(f"{source}: parameter {parameter.name!r} is declared twice")
        parameters.append(parameter)
    _check_templates(parameters, source)
    space = SearchSpace(
        name=str(data.get("name") or Path(source).stem),
        description=str(data.get("description", "")),
        parameters=tuple(parameters),
        enqueue=tuple(_enqueue(data.get("enqueue", []), source)),
        source=source,
    )
    for config in space.enqueue:
        if config.params is not None:
            space.check_params(config.params, f"enqueued config {config.name!r}")
    return space


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
            raise SearchSpaceError(f"{where}: unknown key {key!r}{hint}")


def _number(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SearchSpaceError(f"{where}: '{key}' must be a finite number, not {value!r}")
    return value


def _parameter(raw: Any, index: int, source: str, earlier: list[Parameter]) -> Parameter:
    if not isinstance(raw, Mapping):
        raise SearchSpaceError(f"{source}: parameters[{index}] must be a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise SearchSpaceError(f"{source}: parameters[{index}]: 'name' must be an identifier")
    where = f"{source}: parameter {name!r}"
    _check_keys(raw, PARAMETER_KEYS, where)
    kind = raw.get("type")
    if kind not in ("int", "float", "categorical"):
        raise SearchSpaceError(f"{where}: 'type' must be int, float or categorical, not {kind!r}")
    affects = raw.get("affects")
    if affects not in ("quality", "speed"):
        raise SearchSpaceError(
            f"{where}: 'affects' must be 'quality' (can change the model's outputs) or "
            f"'speed' (cannot), not {affects!r}"
        )
    low, high = _number(raw, "low", where), _number(raw, "high", where)
    step, resolution = _number(raw, "step", where), _number(raw, "resolution", where)
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise SearchSpaceError(f"{where}: 'log' must be true or false")
    choices: tuple[Any, ...] = ()
    if kind == "categorical":
        for key in ("low", "high", "step", "log", "faster", "resolution"):
            if key in raw:
                raise SearchSpaceError(f"{where}: '{key}' does not apply to a categorical")
        raw_choices = raw.get("choices")
        if not isinstance(raw_choices, list) or not raw_choices:
            raise SearchSpaceError(f"{where}: 'choices' must be a non-empty list")
        if any(not isinstance(c, (str, int, float, bool)) for c in raw_choices):
            raise SearchSpaceError(f"{where}: 'choices' may hold strings, numbers and booleans")
        if len(set(map(repr, raw_choices))) != len(raw_choices):
            raise SearchSpaceError(f"{where}: 'choices' has duplicates")
        choices = tuple(raw_choices)
    else:
        if "choices" in raw:
            raise SearchSpaceError(f"{where}: 'choices' applies only to a categorical")
        if low is None or high is None:
            raise SearchSpaceError(f"{where}: 'low' and 'high' are required for type {kind}")
        if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
            raise SearchSpaceError(f"{where}: 'low' and 'high' must be integers for type int")
        if low >= high:
            raise SearchSpaceError(f"{where}: empty range: low {low} is not below high {high}")
        if log and low <= 0:
            raise SearchSpaceError(f"{where}: a log scale needs low > 0, not {low}")
        if step is not None:
            if step <= 0 or (kind == "int" and not float(step).is_integer()):
                raise SearchSpaceError(f"{where}: 'step' must be a positive {kind}, not {step}")
            if step > high - low:
                raise SearchSpaceError(f"{where}: empty range: step {step} is larger than high - low ({high - low})")
            if log and (kind == "float" or step != 1):
                raise SearchSpaceError(f"{where}: use either 'log' or a 'step', not both")
        if resolution is not None and resolution <= 0:
            raise SearchSpaceError(f"{where}: 'resolution' must be positive")
    faster = raw.get("faster")
    if faster not in (None, "lower", "higher"):
        raise SearchSpaceError(f"{where}: 'faster' must be 'lower' or 'higher', not {faster!r}")
    targets = (_target(raw, where), *_also(raw.get("also", []), where))
    parameter = Parameter(
        name=name,
        kind=kind,
        affects=affects,
        targets=targets,
        low=low,
        high=high,
        step=step,
        log=log,
        choices=choices,
        faster=faster,
        resolution=resolution,
        condition=_condition(raw.get("condition"), where, earlier),
    )
    if "default" in raw:
        default = parameter.coerce(raw["default"])
        if kind != "categorical" and not isinstance(default, (int, float)):
            raise SearchSpaceError(f"{where}: 'default' must be a number, not {raw['default']!r}")
        parameter = Parameter(**{**parameter.__dict__, "default": default})
    return parameter


def _target(raw: Mapping[str, Any], where: str) -> EnvTarget:
    env = raw.get("env")
    if not isinstance(env, str) or not env:
        raise SearchSpaceError(f"{where}: 'env' (the manifest env variable it sets) is required")
    json_path = raw.get("json_path")
    template = raw.get("template")
    if json_path is not None and template is not None:
        raise SearchSpaceError(f"{where}: use either 'json_path' or 'template' for {env}, not both")
    if json_path is not None and (not isinstance(json_path, str) or not all(json_path.split("."))):
        raise SearchSpaceError(f"{where}: 'json_path' must look like 'key' or 'outer.inner'")
    if template is not None and not isinstance(template, str):
        raise SearchSpaceError(f"{where}: 'template' must be a string")
    for flag in ("create", "if_present"):
        if not isinstance(raw.get(flag, False), bool):
            raise SearchSpaceError(f"{where}: '{flag}' must be true or false")
    if raw.get("create") and json_path is None:
        raise SearchSpaceError(f"{where}: 'create' applies only with 'json_path'")
    return EnvTarget(
        env=env,
        json_path=tuple(json_path.split(".")) if json_path else (),
        template=template,
        create=raw.get("create", False),
        if_present=raw.get("if_present", False),
    )


def _also(raw: Any, where: str) -> list[EnvTarget]:
    if not isinstance(raw, list):
        raise SearchSpaceError(f"{where}: 'also' must be a list of targets")
    targets = []
    for index, item in enumerate(raw):
        item_where = f"{where}: also[{index}]"
        if not isinstance(item, Mapping):
            raise SearchSpaceError(f"{item_where}: must be a mapping with 'env'")
        _check_keys(item, TARGET_KEYS, item_where)
        targets.append(_target(item, item_where))
    return targets


def _condition(raw: Any, where: str, earlier: list[Parameter]) -> Condition | None:
    if raw is None:
        return None
    where = f"{where}: condition"
    if not isinstance(raw, Mapping):
        raise SearchSpaceError(f"{where}: must be a mapping (env_set: VAR, or param: NAME ...)")
    _check_keys(raw, CONDITION_KEYS, where)
    if ("env_set" in raw) == ("param" in raw):
        raise SearchSpaceError(f"{where}: give exactly one of 'env_set' and 'param'")
    if "env_set" in raw:
        if set(raw) != {"env_set"} or not isinstance(raw["env_set"], str):
            raise SearchSpaceError(f"{where}: 'env_set' takes one variable name and nothing else")
        return Condition(env_set=raw["env_set"])
    name = raw["param"]
    if name not in {p.name for p in earlier}:
        raise SearchSpaceError(f"{where}: 'param' must name an earlier parameter, not {name!r}")
    values = raw.get("in")
    if values is not None and not isinstance(values, list):
        raise SearchSpaceError(f"{where}: 'in' must be a list")
    if values is None and "min" not in raw and "max" not in raw:
        raise SearchSpaceError(f"{where}: give 'in', 'min' or 'max' for {name!r}")
    return Condition(
        param=name,
        values=tuple(values) if values is not None else None,
        minimum=_number(raw, "min", where),
        maximum=_number(raw, "max", where),
    )


def _check_templates(parameters: list[Parameter], source: str) -> None:
    samples = {p.name: (p.choices[0] if p.choices else p.snap(p.bounds[0])) for p in parameters}
    for parameter in parameters:
        values = parameter.choices or tuple(parameter.snap(end) for end in parameter.bounds)
        for target in parameter.targets:
            if target.template is None:
                continue
            for value in values:
                check_template(
                    target.template,
                    {**samples, parameter.name: value},
                    value,
                    f"{source}: parameter {parameter.name!r} ({target.env})",
                )


def _enqueue(raw: Any, source: str) -> list[EnqueuedConfig]:
    if not isinstance(raw, list):
        raise SearchSpaceError(f"{source}: 'enqueue' must be a list")
    configs = []
    for index, item in enumerate(raw):
        where = f"{source}: enqueue[{index}]"
        if item == BASELINE:
            configs.append(EnqueuedConfig(name=BASELINE, params=None))
            continue
        if not isinstance(item, Mapping):
            raise SearchSpaceError(f"{where}: must be '{BASELINE}' or a mapping with 'params'")
        _check_keys(item, ENQUEUE_KEYS, where)
        params = item.get("params")
        if not isinstance(params, Mapping) or not params:
            raise SearchSpaceError(f"{where}: 'params' must be a non-empty mapping")
        configs.append(EnqueuedConfig(name=str(item.get("name") or f"enqueued-{index}"), params=params))
    return configs
