"""A trial's wall-clock limit: past it, stop the server and make the evaluator return.

``TrialWatchdog(limit_s, token=..., thread=...)`` runs a timer beside one
evaluation. When the limit passes it

1. stops every process that carries the trial's server token (SIGTERM, a
   grace period, SIGKILL), and keeps doing so for the token the trial has
   now (a retried start has a new one) until the evaluator returns: its
   requests then fail at once and its server context manager finds nothing
   left to stop;
2. if the evaluator has still not returned ``return_grace_s`` later (it is
   busy in Python, not waiting on the server), raises ``TrialTimedOut`` in
   the evaluating thread, as the signal handler raises ``TrialInterrupted``.

The runner then records the trial as failed with kind ``timeout``, whatever
the evaluator raised on its way out.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable

from sweeper.errors import ServerStopError
from sweeper.serving import stop_servers_with_token

logger = logging.getLogger(__name__)


class TrialTimedOut(BaseException):
    """Raised inside evaluate by the watchdog once the trial is past its limit."""

    # raised by class (CPython's async exceptions take a class): the runner knows the limit
    def __init__(self) -> None:
        super().__init__("the trial ran past its wall-clock limit")


class TrialWatchdog:
    """Context manager around one evaluation; ``expired`` tells whether the limit passed."""

    def __init__(
        self,
        limit_s: float,
        *,
        token: Callable[[], str | None],
        thread: threading.Thread | None = None,
        return_grace_s: float = 30.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        self.limit_s = limit_s
        self._token = token
        ident = (thread or threading.current_thread()).ident
        if ident is None:
            raise ValueError("a trial watchdog watches a thread that has started")
        self._thread_id = ident
        self.return_grace_s = return_grace_s
        self.stop_grace_s = stop_grace_s
        self.expired = False
        self.stopped_pids: list[int] = []
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._raised = False
        self._timer = threading.Thread(target=self._watch, name="trial-watchdog", daemon=True)

    def __enter__(self) -> TrialWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done.set()
            if self._raised:  # raised but maybe not yet delivered: take it back
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), None)
        self._timer.join(timeout=5.0)

    def _watch(self) -> None:
        if self._done.wait(self.limit_s):
            return
        self.expired = True
        logger.warning("trial past its %.0f s limit: stopping its server", self.limit_s)
        give_up = time.monotonic() + self.return_grace_s
        # until the evaluator returns: stop whatever server the trial has now (a retry
        # started after the first stop carries a new token)
        while not self._done.is_set() and time.monotonic() < give_up:
            token = self._token()
            if token:
                try:
                    stopped = stop_servers_with_token(token, grace_s=self.stop_grace_s)
                except ServerStopError as exc:
                    logger.error("the timed-out trial's server could not be stopped: %s", exc)
                    stopped = exc.pids
                self.stopped_pids += [pid for pid in stopped if pid not in self.stopped_pids]
            self._done.wait(0.5)
        with self._lock:
            if self._done.is_set():
                return
            logger.warning("the evaluator did not return after its server stopped: raising in it")
            self._raised = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(TrialTimedOut))
