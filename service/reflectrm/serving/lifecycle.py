"""How the service stops: drained on a signal, or ended when its engine fails.

- A periodic probe checks the engine's health every ``engine_check_interval_s``, with or without
  traffic. When the engine has died (or cannot start) the service stops judging at once:
  ``/ready`` answers 503, judgments in flight and waiting end in 503 with the reason, and with
  ``exit_on_engine_failure`` (the default) the process exits with status ``EXIT_ENGINE_FAILURE``
  so that its supervisor (compose, Kubernetes, systemd) starts a fresh one. Restarting an engine
  inside the process is not attempted: a fresh process is the one state known to be clean.
- ``drain`` (SIGTERM or SIGINT, see ``reflectrm.server``): ``/ready`` and new judgments get 503
  at once, queued ones too; admitted judgments get ``shutdown_grace_s`` to finish and are then
  aborted (503); then the process exits with status 0.

The server that runs the app gives ``on_exit``; without one (tests) the exit code is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from reflectrm.serving.service import JudgingService

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ENGINE_FAILURE = 1
STOPPING = "the service is shutting down; retry on another replica or after it restarts"
# How long aborted judgments get to send their 503 before the server stops.
ABORT_SETTLE_S = 5.0


class Lifecycle:
    def __init__(self, service: JudgingService) -> None:
        self.service = service
        self.exit_code: int | None = None
        self.on_exit: Callable[[int], None] | None = None
        self.failed: str | None = None
        self.draining = False
        self._probe: asyncio.Task[None] | None = None
        self._drain: asyncio.Task[None] | None = None
        self._exiting: asyncio.Task[None] | None = None
        self._force = asyncio.Event()

    # --- the probe -------------------------------------------------------------------------

    def start(self) -> None:
        self._probe = asyncio.create_task(self._watch(), name="engine-health-probe")

    async def stop(self) -> None:
        for task in (self._probe, self._drain, self._exiting):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watch(self) -> None:
        interval = self.service.settings.engine_check_interval_s
        while self.failed is None:
            await asyncio.sleep(interval)
            judge = self.service.judge
            if judge is None:
                continue  # loading, or no longer serving
            try:
                async with asyncio.timeout(max(10.0, 5 * interval)):
                    await judge.engine.check_health()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # EngineError, a hung check, or anything else
                if self.service.settings.engine == "remote":
                    # A fleet can come back: /ready and judgments answer 503 meanwhile (the
                    # remote engine's own errors); only the in-process engine's death is final.
                    log.warning("the engine fleet failed its health check: %s", _describe(exc))
                    continue
                self.engine_failed(f"the engine failed its health check: {_describe(exc)}")

    # --- failure ---------------------------------------------------------------------------

    def engine_failed(self, reason: str) -> None:
        """The engine cannot serve (died, or did not start): stop judging now, and exit when
        configured to."""
        if self.failed is not None:
            return
        self.failed = reason
        self.service.stop_serving(reason)
        self.service.cohorts.refuse(reason)
        aborted = self.service.admission.abort(reason)
        exiting = self.service.settings.exit_on_engine_failure
        log.error(
            "%s; %d judgment(s) in flight ended with 503; %s",
            reason,
            aborted,
            f"exiting with status {EXIT_ENGINE_FAILURE} (REFLECTRM_EXIT_ON_ENGINE_FAILURE)"
            if exiting
            else "staying up answering 503 (REFLECTRM_EXIT_ON_ENGINE_FAILURE=false)",
        )
        if exiting:
            self._exit_after_settling(EXIT_ENGINE_FAILURE)

    # --- draining --------------------------------------------------------------------------

    def begin_drain(self) -> None:
        """Start draining (idempotent); call on the app's event loop."""
        if self._drain is None:
            self._drain = asyncio.create_task(self.drain(), name="drain")

    def abort_now(self) -> None:
        """Cut the grace period short (a second signal)."""
        self._force.set()
        self.begin_drain()

    async def drain(self) -> None:
        self.draining = True
        service = self.service
        grace = service.settings.shutdown_grace_s
        service.stop_serving(STOPPING)
        service.admission.close(STOPPING)
        # Members waiting for their cohorts hold no slot: answer them now (503), not when the
        # server's graceful timeout cancels their handlers.
        service.cohorts.refuse(STOPPING)
        log.info(
            "draining: /ready and new judgments answer 503; %d judgment(s) in flight get up "
            "to %g s (REFLECTRM_SHUTDOWN_GRACE_S)",
            service.admission.in_flight,
            grace,
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._until(lambda: service.admission.in_flight == 0 or self._force.is_set())
        if service.admission.in_flight:
            aborted = service.admission.abort(
                f"{STOPPING} (the judgment did not finish within the grace period, "
                "REFLECTRM_SHUTDOWN_GRACE_S)"
            )
            log.warning("grace period over: %d judgment(s) aborted with 503", aborted)
        await self._settle()
        self.request_exit(EXIT_OK)

    # --- exiting ---------------------------------------------------------------------------

    def request_exit(self, code: int) -> None:
        self.exit_code = max(code, self.exit_code or 0)
        if self.on_exit is not None:
            self.on_exit(self.exit_code)

    def _exit_after_settling(self, code: int) -> None:
        async def settle_then_exit() -> None:
            await self._settle()
            self.request_exit(code)

        self.exit_code = max(code, self.exit_code or 0)
        with contextlib.suppress(RuntimeError):  # no running loop: recorded above
            self._exiting = asyncio.get_running_loop().create_task(settle_then_exit())

    async def _settle(self) -> None:
        """Give aborted judgments a moment to send their answers."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ABORT_SETTLE_S):
                await self._until(lambda: self.service.admission.in_flight == 0)

    @staticmethod
    async def _until(condition: Callable[[], bool], poll_s: float = 0.05) -> None:
        while not condition():
            await asyncio.sleep(poll_s)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, TimeoutError):
        return "its health check did not answer"
    return text or type(exc).__name__
