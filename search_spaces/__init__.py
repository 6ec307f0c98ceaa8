"""Search spaces: which knobs a study turns, and how each reaches the server.

A space is declared in a YAML or TOML file (or one of the bundled presets)::

    name: my-space
    parameters:
      - name: sliding_window
        type: int                 # int | float | categorical
        low: 128
        high: 512
        step: 4                   # or log: true; categorical takes choices: [...]
        affects: quality          # quality: can change outputs; speed: cannot
        faster: lower             # optional: which direction is faster
        default: 512              # the value in force when the manifest does not set it
        env: HF_OVERRIDES         # the manifest env variable it writes ...
        json_path: text_config.sliding_window   # ... at this key of its JSON (or template:)
        create: true              # start from {} if the manifest has no HF_OVERRIDES
        also:                     # more variables to write (if_present: only if set)
          - {env: SLIDING_WINDOW, if_present: true}
      - name: centroid_top_k
        ...
        condition: {env_set: SPECULATIVE_CONFIG}  # or {param: NAME, in: [...], min:, max:}
    enqueue:                      # tried first, in this order
      - {name: known-good, params: {sliding_window: 188}}
      - baseline                  # the base manifest's own values
"""

from __future__ import annotations

from search_spaces._loader import (
    PRESETS_DIR,
    load_preset,
    load_space,
    preset_names,
    space_from_dict,
)
from search_spaces._parameter import Condition, Parameter
from search_spaces._space import BASELINE, BaseValueError, EnqueuedConfig, SearchSpace
from search_spaces._target import MISSING, EnvTarget

__all__ = [
    "BASELINE",
    "MISSING",
    "BaseValueError",
    "PRESETS_DIR",
    "Condition",
    "EnqueuedConfig",
    "EnvTarget",
    "Parameter",
    "SearchSpace",
    "load_preset",
    "load_space",
    "preset_names",
    "space_from_dict",
]
