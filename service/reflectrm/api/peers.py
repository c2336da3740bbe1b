"""Several replicas serving one job's cohorts (``REFLECTRM_PEERS``): a member's call sent to a
replica that does not own its cohort is forwarded to the owner.

A trainer that rotates its calls over several judge URLs (OpenRLHF given several
``--reward.remote_url`` values) sends each replica a share of every group, so without peers every
cohort is cut with the members one replica got. With peers, each cohort has one owner
(``serving.ownership``: rendezvous hashing of the cohort's tenant and group over the peers'
list), and a replica given a member of a cohort it does not own posts the same call (path, query
and body, with the caller's Authorization and X-Reflectrm-Tenant) to the owner and answers with
the owner's reply, status and body. The forwarded call says so in ``X-Reflectrm-Forwarded``; a
replica never forwards such a call again, so a call makes one hop at most, whatever the
replicas' lists say.

The owner unreachable, not serving (502 or 503), or not answering in time: the member is judged
here instead, with whatever members of its cohort reach this replica, and its reply says
``cohort_split``. "In time" is the caller's deadline (X-Reflectrm-Deadline-S, else
REFLECTRM_PEER_DEADLINE_S) less what the local judging needs: the cohort's timeout and 5 s. A
forward never waits longer, so a member is never lost to a dead owner, nor held past its
caller's patience.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import httpx
from fastapi import Depends, Request, Response

from reflectrm.metrics import Metrics
from reflectrm.serving.admission import until_disconnected
from reflectrm.serving.ownership import owner
from reflectrm.settings import Settings, normal_url

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-reflectrm-forwarded"
DEADLINE_HEADER = "x-reflectrm-deadline-s"
# The caller's headers a forwarded call carries: its credentials and tenant (so the owner sees
# the same tenant, hence the same cohort), its request id, and the body's type.
RELAYED_HEADERS = ("authorization", "x-reflectrm-tenant", "x-request-id", "content-type")
# The owner's reply headers relayed with its body.
RELAYED_REPLY_HEADERS = ("retry-after", "x-request-id")
# Time kept for the local judging of a member whose owner did not answer, beyond its cohort's
# timeout.
LOCAL_MARGIN_S = 5.0
CONNECT_TIMEOUT_S = 2.0
# Owner replies that mean "not serving": the member is judged here instead.
NOT_SERVING = (502, 503)
# How often a forwarding replica checks that its caller is still there.
POLL_S = 0.25


@dataclass(frozen=True)
class Here:
    """The call is judged on this replica. ``split``: although another replica owns (some of)
    its cohorts, so its cohort is split between replicas."""

    split: bool


class Peers:
    def __init__(
        self,
        urls: Sequence[str],
        me: str,
        deadline_s: float,
        metrics: Metrics,
    ) -> None:
        self.urls = [normal_url(u) for u in urls]
        self.me = normal_url(me)
        if self.me not in self.urls:
            raise ValueError(f"{me!r} is not one of the peers {self.urls}")
        self.deadline_s = deadline_s
        self.metrics = metrics
        metrics.enable_peers()
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics) -> Peers | None:
        """The peers the settings name; None when REFLECTRM_PEERS is unset (no forwarding)."""
        urls = settings.peer_urls()
        if not urls:
            return None
        assert settings.peer_url is not None  # the settings' validator makes sure
        return cls(urls, settings.peer_url, settings.peer_deadline_s, metrics)

    def owner(self, name: str) -> str:
        return owner(self.urls, name)

    async def route(
        self,
        request: Request,
        names: Sequence[str],
        cohort_timeout_s: float,
        elapsed_s: float = 0.0,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> Response | Here:
        """Where the call of members of cohorts ``names`` is judged: the owner's reply when it
        was forwarded and answered, else ``Here``. A caller that goes away while the owner
        judges ends the forwarded call too (ClientGoneError), so the owner keeps the member for
        the caller's retry, as it would its own caller's."""
        owners = {self.owner(name) for name in names}
        if owners == {self.me}:
            return Here(split=False)
        if request.headers.get(FORWARDED_HEADER):
            # Forwarded here: judged here, never sent on again, though this replica's list has
            # another owner (the replicas' lists differ, as during a rollout).
            return Here(split=True)
        if len(owners) > 1:
            # Members of cohorts owned by several replicas in one call: judged here together.
            return Here(split=True)
        [target] = owners
        budget = self._deadline(request) - elapsed_s - cohort_timeout_s - LOCAL_MARGIN_S
        if budget <= 0:
            return self._fallback(target, "no time is left to wait for it")
        try:
            async with asyncio.timeout(budget):
                post = self._post(request, target, budget)
                if is_disconnected is None:
                    reply = await post
                else:
                    reply = await until_disconnected(post, is_disconnected, poll_s=POLL_S)
        except (httpx.HTTPError, TimeoutError) as exc:
            why = f"{type(exc).__name__}" + (f": {exc}" if str(exc) else "")
            return self._fallback(target, why)
        if reply.status_code in NOT_SERVING:
            return self._fallback(target, f"it answered {reply.status_code}")
        self.metrics.peer_forwarded("ok" if reply.status_code < 400 else "error")
        headers = {k: reply.headers[k] for k in RELAYED_REPLY_HEADERS if k in reply.headers}
        return Response(
            content=reply.content,
            status_code=reply.status_code,
            headers=headers,
            media_type=reply.headers.get("content-type"),
        )

    def _deadline(self, request: Request) -> float:
        """The caller's deadline in seconds from its call: the one it sent, else the setting's."""
        sent = request.headers.get(DEADLINE_HEADER)
        if sent is not None:
            with contextlib.suppress(ValueError):
                seconds = float(sent)
                if math.isfinite(seconds) and seconds > 0:
                    return seconds
        return self.deadline_s

    async def _post(self, request: Request, target: str, budget: float) -> httpx.Response:
        headers = {k: request.headers[k] for k in RELAYED_HEADERS if k in request.headers}
        headers[FORWARDED_HEADER] = "1"
        headers[DEADLINE_HEADER] = f"{budget:.3f}"
        url = target + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        timeout = httpx.Timeout(budget, connect=min(CONNECT_TIMEOUT_S, budget))
        return await self._http().post(
            url, content=await request.body(), headers=headers, timeout=timeout
        )

    def _fallback(self, target: str, why: str) -> Here:
        log.warning(
            "cohort owner %s did not take a member (%s): judged here, the reply marked "
            "cohort_split",
            target,
            why,
        )
        self.metrics.peer_forwarded("fallback_local")
        return Here(split=True)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def close_peers(peers: Peers | None) -> None:
    if peers is not None:
        await peers.aclose()


def get_peers(request: Request) -> Peers | None:
    peers: Peers | None = getattr(request.app.state, "peers", None)
    return peers


PeersDep = Annotated[Peers | None, Depends(get_peers)]
