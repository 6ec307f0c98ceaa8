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
    exec_server,
)
from sweeper.serving._drafter import TOP_K_FIELD, drafter_with_top_k
from sweeper.serving._failures import FailureKind, classify, with_kind
from sweeper.serving._limits import ModelLimits, model_limits
from sweeper.serving._process import (
    DEFAULT_HOST,
    TOKEN_VARIABLE,
    ServerProcess,
    free_port,
    port_is_free,
    stop_servers_with_token,
)
from sweeper.serving._startup import START_PHASES, Startup, parse_startup
from sweeper.serving._venv import (
    CACHE_VARIABLE,
    ServerVenv,
    ServerVenvError,
    dependencies_key,
    server_venv,
    venv_cache_root,
)

__all__ = [
    "CACHE_VARIABLE",
    "DEFAULT_HOST",
    "FailureKind",
    "GREEDY_GENERATION_CONFIG",
    "TOKEN_VARIABLE",
    "TOP_K_FIELD",
    "ModelLimits",
    "ServeCommand",
    "ServerProcess",
    "ServerVenv",
    "ServerVenvError",
    "START_PHASES",
    "Startup",
    "build_serve_command",
    "classify",
    "dependencies_key",
    "drafter_with_top_k",
    "exec_server",
    "free_port",
    "model_limits",
    "parse_startup",
    "port_is_free",
    "server_venv",
    "stop_servers_with_token",
    "with_kind",
    "venv_cache_root",
]
