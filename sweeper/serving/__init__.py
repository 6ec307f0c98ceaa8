"""One server process: the patched serve command, its start, readiness and stop.

Everything that knows how a manifest becomes a running vLLM server lives
here: the env -> vLLM arguments translation (``sweeper serve``), the
``ServerProcess`` context manager, the process-group and port helpers
(``processes``), what kind of failure ended a server (``classify``), the
drafter copy behind ``CENTROID_TOP_K``, the model limits read before a
server starts, and our vLLM plugin.
"""

from sweeper.serving._command import (
    GREEDY_GENERATION_CONFIG,
    ServeCommand,
    build_serve_command,
    check_serve_env,
    exec_server,
)
from sweeper.serving._compile_cache import COMPILE_CACHE_VARIABLE, CompileCache, speculative_tokens
from sweeper.serving._drafter import TOP_K_FIELD, drafter_with_top_k
from sweeper.serving._failures import FailureKind, classify, with_kind
from sweeper.serving._launcher import (
    DEFAULT_WARM_STARTS,
    WarmLaunchers,
    WarmPlan,
    WarmStarts,
    shared_launchers,
    warm_plan,
)
from sweeper.serving._limits import ModelLimits, model_limits
from sweeper.serving._process import (
    DEFAULT_HOST,
    TOKEN_VARIABLE,
    ServerProcess,
    free_port,
    port_is_free,
    stop_servers_with_token,
)
from sweeper.serving._startup import (
    API_READY,
    ENGINE_INIT,
    LEGACY_START_PHASES,
    SPAWN,
    START_PHASES,
    Startup,
    parse_startup,
    resolved_config,
)
from sweeper.serving._venv import (
    CACHE_VARIABLE,
    ServerVenv,
    ServerVenvError,
    dependencies_key,
    server_venv,
    venv_cache_root,
)

__all__ = [
    "API_READY",
    "CACHE_VARIABLE",
    "ENGINE_INIT",
    "SPAWN",
    "COMPILE_CACHE_VARIABLE",
    "CompileCache",
    "DEFAULT_HOST",
    "DEFAULT_WARM_STARTS",
    "LEGACY_START_PHASES",
    "FailureKind",
    "GREEDY_GENERATION_CONFIG",
    "TOKEN_VARIABLE",
    "TOP_K_FIELD",
    "WarmLaunchers",
    "WarmPlan",
    "WarmStarts",
    "ModelLimits",
    "ServeCommand",
    "ServerProcess",
    "ServerVenv",
    "ServerVenvError",
    "START_PHASES",
    "Startup",
    "build_serve_command",
    "check_serve_env",
    "classify",
    "dependencies_key",
    "drafter_with_top_k",
    "exec_server",
    "free_port",
    "model_limits",
    "parse_startup",
    "port_is_free",
    "resolved_config",
    "server_venv",
    "shared_launchers",
    "speculative_tokens",
    "stop_servers_with_token",
    "warm_plan",
    "with_kind",
    "venv_cache_root",
]
