from __future__ import annotations

import sys
from pathlib import Path

# the toy landscape and the worker script live beside these tests
sys.path.insert(0, str(Path(__file__).resolve().parent))
