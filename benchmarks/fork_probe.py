"""Does NVML work in a process forked after a given parent state? (issue 46, gpu_check's ``fork`` part)

    python -m benchmarks.fork_probe CASE      # prints one JSON object

A server forked from sweeper's warm launcher on an H100 could not query the
device's memory through NVML, and vLLM then resolved other defaults than a
fresh server (docs/gpu.md, "Warm starts on a GPU"). This probe
sets one parent state, forks, and has the child query GPU 0's total memory
through NVML (``nvidia-ml-py``), the way vLLM's platform does
(``nvmlInit``, query, ``nvmlShutdown``; by ctypes where ``nvidia-ml-py``
is missing). The cases, each in a fresh
interpreter (``gpu_check`` runs them one by one):

- ``none``: the parent touched nothing;
- ``nvml-closed``: the parent called ``nvmlInit`` and ``nvmlShutdown`` (vLLM's
  platform probe at import does that);
- ``nvml-open``: the parent holds NVML initialised across the fork;
- ``torch``: the parent imported torch;
- ``torch-count``: the parent imported torch and asked ``torch.cuda.device_count()``;
- ``vllm``: the parent imported vLLM's OpenAI server and resolved its platform,
  as the launcher does; the child also asks vLLM's platform for the memory
  (the query whose failure changed ``max_num_batched_tokens``).

Only the standard library is imported at the top, so that the parent's state
is the case's and nothing else. A failure is a value in the output, not an
exit: ``{"case", "parent": {...}, "child": {...}}``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import sys
from typing import Any

CASES = ("none", "nvml-closed", "nvml-open", "torch", "torch-count", "vllm")


def first_visible_index() -> int:
    """The host index of the first GPU this process's ``CUDA_VISIBLE_DEVICES`` names (0 unset)."""
    return int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)


def nvml_total_gib(*, keep_open: bool = False) -> dict[str, Any]:
    """GPU 0's total memory through NVML, or the error: ``{"gib": x}`` or ``{"error": "..."}``.

    Through ``nvidia-ml-py`` (vLLM's binding) where it is installed, else through
    the driver's library by ctypes (a host with torch but no vLLM); ``via`` says which.
    """
    try:
        importlib.import_module("pynvml")
    except ImportError:
        return {"via": "ctypes", **_ctypes_total_gib(keep_open=keep_open)}
    return {"via": "pynvml", **_pynvml_total_gib(keep_open=keep_open)}


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _ctypes_total_gib(*, keep_open: bool) -> dict[str, Any]:
    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return {"error": f"OSError: {exc}"}
    code = library.nvmlInit_v2()
    if code != 0:
        return {"error": f"nvmlInit_v2 returned {code}"}
    try:
        handle, memory = ctypes.c_void_p(), _Memory()
        code = library.nvmlDeviceGetHandleByIndex_v2(first_visible_index(), ctypes.byref(handle))
        if code == 0:
            code = library.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
        return {"gib": round(memory.total / 2**30, 2)} if code == 0 else {"error": f"NVML returned {code}"}
    finally:
        if not keep_open:
            library.nvmlShutdown()


def _pynvml_total_gib(*, keep_open: bool) -> dict[str, Any]:
    try:
        pynvml: Any = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(first_visible_index())
            return {"gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2)}
        finally:
            if not keep_open:
                pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - the failure is the figure
        return {"error": f"{type(exc).__name__}: {exc}"}


def vllm_total_gib() -> dict[str, Any]:
    """GPU 0's total memory as vLLM's platform reports it (the query behind its batch-size defaults)."""
    try:
        platforms: Any = importlib.import_module("vllm.platforms")
        return {"gib": round(platforms.current_platform.get_device_total_memory() / 2**30, 2)}
    except Exception as exc:  # noqa: BLE001 - the failure is the figure
        return {"error": f"{type(exc).__name__}: {exc}"}


def set_parent_state(case: str) -> dict[str, Any]:
    """Put this process in ``case``'s state; what the parent itself saw."""
    if case == "none":
        return {}
    if case in ("nvml-closed", "nvml-open"):
        return {"nvml": nvml_total_gib(keep_open=case == "nvml-open")}
    if case in ("torch", "torch-count"):
        torch: Any = importlib.import_module("torch")
        seen: dict[str, Any] = {"torch": torch.__version__, "cuda_build": torch.version.cuda}
        if case == "torch-count":
            seen["device_count"] = torch.cuda.device_count()
            seen["cuda_initialized"] = torch.cuda.is_initialized()
        return seen
    if case == "vllm":
        importlib.import_module("vllm.entrypoints.openai.api_server")
        platforms: Any = importlib.import_module("vllm.platforms")
        return {"platform": type(platforms.current_platform).__name__}
    raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")


def probe(case: str) -> dict[str, Any]:
    """Set the parent's state, fork, and return what the child's queries gave."""
    parent = set_parent_state(case)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: query, write one JSON line, leave without the parent's exit handlers
        os.close(read_end)
        child: dict[str, Any] = {"pid": os.getpid(), "parent_pid": os.getppid(), "nvml": nvml_total_gib()}
        if case == "vllm":
            child["vllm"] = vllm_total_gib()
        os.write(write_end, json.dumps(child).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return {"case": case, "pid": os.getpid(), "parent": parent, "child": json.loads(b"".join(chunks) or b"{}")}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in CASES:
        print(f"usage: python -m benchmarks.fork_probe CASE, one of {', '.join(CASES)}", file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(probe(args[0])), flush=True)


if __name__ == "__main__":
    main()
