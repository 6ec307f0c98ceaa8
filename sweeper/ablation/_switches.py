"""Which settings of a manifest an ablation turns, and what each arm's server runs with.

A **switch** is one env key of the manifest and two of its values: the
value whose effect is judged (``subject``: ``1`` for a flag) and the value
it is judged against (``reference``: ``0`` for a flag the manifest sets;
unset, None, for a key it does not, so the server's own default is the
reference). By default every env value ``0`` or ``1`` is a flag; ``--flags
A,B`` names them instead, and ``--alternative KEY=VALUE`` compares a value
with the manifest's own (``DTYPE=float32``: the manifest's value is the
reference, ``float32`` the subject).

Two modes:

* **leave-one-out** (the default): the base is the manifest as it is, and
  each arm turns one switch away from the manifest's value;
* **add-one-in**: the base has every switch at its reference value (off),
  and each arm turns one switch to its subject value (on).

Either way an arm differs from the base in exactly one key, and the
effect reported is the subject's over the reference (``effect_sign``
says whether the arm or the base holds the subject).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence

from sweeper.errors import UserInputError

FLAG_VALUES = ("0", "1")  # an env value in here makes the key a flag by default
# ... unless its name says it holds a number that happens to be 0 or 1 (MAX_NUM_SEQS=1,
# WARMUP_MAX_TOKENS=1, VLLM_CPU_KVCACHE_SPACE=1): name such a key in --flags to ablate it
NUMERIC_NAME = re.compile(
    r"(^|_)(MAX|MIN|NUM|COUNT)(_|$)|_(TOKENS|SEQS|SPACE|SIZE|LEN|CALLS|SLOTS|PROMPTS|SEED|BLOCK|PORT|Q|K|"
    r"UTILIZATION|BYTES|GB|MB|GIB|MIB|STEPS|WORKERS|THREADS)$"
)


def looks_numeric(key: str) -> bool:
    """Whether ``key``'s name says it holds a count or a size, not an on/off switch."""
    return NUMERIC_NAME.search(key) is not None


class AblationMode(str, enum.Enum):
    """Where the arms start from: the whole manifest, or a base with every switch off."""

    LEAVE_ONE_OUT = "leave-one-out"
    ADD_ONE_IN = "add-one-in"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Switch:
    """One env key, the value judged (``subject``) and the value it is judged against (``reference``)."""

    key: str
    subject: str
    reference: str | None  # None: unset (the server's default)
    manifest_value: str | None  # what the manifest sets (None: the key is not in its env)

    @property
    def label(self) -> str:
        """``ENFORCE_EAGER=1`` (vs 0): how tables name it."""
        return f"{self.key}={self.subject}"

    @property
    def reference_text(self) -> str:
        return "unset" if self.reference is None else self.reference

    def base_value(self, mode: AblationMode) -> str | None:
        """The value the base runs with (None: the key is left out, as in the manifest)."""
        if mode is AblationMode.ADD_ONE_IN:
            return self.reference
        return self.manifest_value

    def arm_value(self, mode: AblationMode) -> str | None:
        """The value this switch's arm runs with: the one the base does not hold."""
        if mode is AblationMode.ADD_ONE_IN:
            return self.subject
        return self.reference if self.manifest_value == self.subject else self.subject

    def effect_sign(self, mode: AblationMode) -> int:
        """+1 when the arm holds the subject (effect = arm / base), -1 when the base does."""
        return 1 if self.arm_value(mode) == self.subject else -1


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationArms:
    """The base's env overrides and each switch's, for one mode."""

    mode: AblationMode
    switches: tuple[Switch, ...]

    def base_overrides(self) -> dict[str, str]:
        """Env overrides that turn the manifest into the base (empty for leave-one-out)."""
        overrides: dict[str, str] = {}
        for switch in self.switches:
            value = switch.base_value(self.mode)
            if value is not None and value != switch.manifest_value:
                overrides[switch.key] = value
        return overrides

    def arm_overrides(self, index: int) -> dict[str, str]:
        """Env overrides of switch ``index``'s arm: the base's, with that switch turned."""
        switch = self.switches[index]
        value = switch.arm_value(self.mode)
        if value is None:  # an unset reference is only ever the base's (the key is not in the env)
            raise ValueError(f"switch {switch.key}: its arm cannot unset a key the manifest sets")
        return {**self.base_overrides(), switch.key: value}


def find_switches(
    env: Mapping[str, str],
    *,
    flags: Sequence[str] | None = None,
    alternatives: Mapping[str, str] | None = None,
    source: str = "manifest",
) -> tuple[Switch, ...]:
    """The switches of a manifest's ``env``, in the manifest's order, then the alternatives'.

    ``flags``: these keys only, each a flag (``0``/``1``; a key the env
    lacks is judged ``1`` against unset, the server's default).
    ``alternatives``: ``KEY -> value``: that value judged against the
    manifest's own (or against unset). Without ``flags``, every env
    value ``0`` or ``1`` is a flag, except under a name that holds a number
    (``looks_numeric``: ``MAX_NUM_SEQS=1`` is not a switch). A key named twice, a flag the env sets
    to something else, or an alternative equal to the manifest's value is
    a ``UserInputError`` naming it.
    """
    alternatives = dict(alternatives or {})
    switches: list[Switch] = []
    if flags is None:
        flag_keys = [
            key
            for key, value in env.items()
            if value in FLAG_VALUES and key not in alternatives and not looks_numeric(key)
        ]
    else:
        flag_keys = list(flags)
    seen: set[str] = set()
    for key in flag_keys:
        if not key:
            raise UserInputError("--flags: an empty name")
        if key in seen:
            raise UserInputError(f"--flags: {key} is named twice")
        seen.add(key)
        value = env.get(key)
        if value is not None and value not in FLAG_VALUES:
            raise UserInputError(
                f"--flags: {key} is {value!r} in the {source}, not 0 or 1; give it as an alternative ({key}=VALUE)"
            )
        reference = None if value is None else "0"
        switches.append(Switch(key=key, subject="1", reference=reference, manifest_value=value))
    for key, value in alternatives.items():
        if key in seen:
            raise UserInputError(f"--alternative {key}: the key is also a flag")
        if value == env.get(key):
            raise UserInputError(f"--alternative {key}={value}: that is the {source}'s own value")
        seen.add(key)
        switches.append(Switch(key=key, subject=value, reference=env.get(key), manifest_value=env.get(key)))
    if not switches:
        raise UserInputError(f"the {source} has no env value 0 or 1 to ablate; name switches with --flags or KEY=VALUE")
    return tuple(switches)
