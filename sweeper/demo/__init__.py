"""The bundled demo: a tiny Gemma 4 model with an MTP drafter, its manifests and data.

Everything here is package data built by ``scripts/build_tiny_model.py``.
``manifest`` serves the model on CPU (float32, eager, the CPU KV-cache
size); ``gpu_manifest`` serves the same files on a CUDA GPU (bfloat16,
compiled with CUDA graphs, 30 % of the GPU's memory, vLLM's sampler
without flashinfer). ``choose_demo_manifest`` picks the one that fits this
host: the GPU manifest where NVML sees a GPU, else the CPU one.
"""

from sweeper.demo._choice import DemoChoice, choose_demo_manifest
from sweeper.demo._paths import DATA_DIR, DemoPaths, demo_paths

__all__ = ["DATA_DIR", "DemoChoice", "DemoPaths", "choose_demo_manifest", "demo_paths"]
