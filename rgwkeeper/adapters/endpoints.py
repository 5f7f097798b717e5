"""Several RGW endpoints of one zone behind one client: each request goes to the endpoint with
the fewest requests in flight (ties take turns), a request that cannot connect is sent to the
next endpoint, and an endpoint that refused is left out for a while (2 s, doubling to 60 s while
it keeps refusing). Per endpoint: requests, connection failures, and the rate since the start.

Only a failure to *connect* moves a request: the request never reached that RGW. A timeout or
an answer (an error too) is the caller's to handle; the request may have run. An endpoint is
back in as soon as a request sent to it after it was put out gets an answer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, Mapping, TypeVar

_C = TypeVar("_C")
_T = TypeVar("_T")

FIRST_DOWN_S = 2.0
MAX_DOWN_S = 60.0


@dataclass
class EndpointState:
    requests: int = 0
    failures: int = 0  # requests that could not connect here
    in_flight: int = 0
    down_until: float = 0.0
    down_s: float = 0.0  # how long the last refusal put it out (0: it answers)
    #: Bumped each time the endpoint is put out. A request's outcome changes the state only if no
    #: other put it out since the request was sent: refusals at the same moment put it out once
    #: (not 2 s doubled eight times), and a request sent before an outage that answers after it
    #: does not bring the endpoint back.
    epoch: int = 0


class Endpoints(Generic[_C]):
    """``clients`` maps each endpoint URL to the client that talks to it, in the operator's order."""

    def __init__(self, clients: Mapping[str, _C], *, clock: Callable[[], float] = time.monotonic) -> None:
        if not clients:
            raise ValueError("no RGW endpoint")
        self.clients = dict(clients)
        self.clock = clock
        self.state = {url: EndpointState() for url in self.clients}
        self.started = clock()
        self._turn = 0
        self._lock = threading.Lock()

    @property
    def urls(self) -> list[str]:
        return list(self.clients)

    def first(self) -> _C:
        return next(iter(self.clients.values()))

    def _take(self, tried: set[str]) -> tuple[str, int] | None:
        with self._lock:
            now = self.clock()
            left = [u for u in self.clients if u not in tried]
            if not left:
                return None
            # Out endpoints are tried last (soonest back first), never skipped: all may be out.
            up = [u for u in left if self.state[u].down_until <= now]
            if up:
                fewest = min(self.state[u].in_flight for u in up)
                ties = [u for u in up if self.state[u].in_flight == fewest]
                url = ties[self._turn % len(ties)]
                self._turn += 1
            else:
                url = min(left, key=lambda u: self.state[u].down_until)
            s = self.state[url]
            s.in_flight += 1
            s.requests += 1
            return url, s.epoch

    def _done(self, url: str, epoch: int, outcome: str) -> None:
        """``outcome``: "ok" (answered), "refused" (could not connect) or "other" (a timeout, an
        error after connecting, a cancellation: says nothing about the endpoint being up)."""
        with self._lock:
            s = self.state[url]
            s.in_flight -= 1
            if outcome == "refused":
                s.failures += 1
                if epoch == s.epoch:
                    s.down_s = min(MAX_DOWN_S, s.down_s * 2) if s.down_s else FIRST_DOWN_S
                    s.down_until = self.clock() + s.down_s
                    s.epoch += 1
            elif outcome == "ok" and s.down_s and epoch == s.epoch:
                s.down_s = 0.0
                s.down_until = 0.0

    def call(self, fn: Callable[[_C], _T], *, refused: Callable[[BaseException], bool]) -> _T:
        """``fn(client)`` on the least busy endpoint; on an exception ``refused`` says is a failure
        to connect, on the next one. The last such exception is raised when every endpoint refused."""
        tried: set[str] = set()
        last: BaseException | None = None
        while (taken := self._take(tried)) is not None:
            url, epoch = taken
            tried.add(url)
            outcome = "other"
            try:
                result = fn(self.clients[url])
                outcome = "ok"
                return result
            except BaseException as exc:
                if not refused(exc):
                    raise
                outcome, last = "refused", exc
            finally:
                self._done(url, epoch, outcome)
        assert last is not None
        raise last

    async def acall(self, fn: Callable[[_C], Awaitable[_T]], *, refused: Callable[[BaseException], bool],
                    reached: Callable[[_T], bool] = lambda result: True) -> _T:
        """:meth:`call` for a coroutine; a result ``reached`` says never got to RGW (a load
        request reports that instead of raising) moves on too, and is returned if every
        endpoint gave one."""
        tried: set[str] = set()
        outcome_of_all: tuple[_T] | BaseException | None = None
        while (taken := self._take(tried)) is not None:
            url, epoch = taken
            tried.add(url)
            outcome = "other"
            try:
                result = await fn(self.clients[url])
                outcome = "ok" if reached(result) else "refused"
                if outcome == "ok":
                    return result
                outcome_of_all = (result,)
            except BaseException as exc:
                if not refused(exc):
                    raise
                outcome, outcome_of_all = "refused", exc
            finally:
                self._done(url, epoch, outcome)
        if isinstance(outcome_of_all, BaseException):
            raise outcome_of_all
        assert outcome_of_all is not None
        return outcome_of_all[0]

    def counts(self) -> dict[str, tuple[int, int]]:
        """Requests and failures per endpoint so far (to report one run's share: ``report(since=)``)."""
        with self._lock:
            return {url: (s.requests, s.failures) for url, s in self.state.items()}

    def report(self, *, since: dict[str, tuple[int, int]] | None = None,
               elapsed_s: float | None = None) -> list[dict[str, Any]]:
        """Per endpoint, in the configured order: requests, failures to connect, and requests per
        second, since ``since`` (``counts()`` then) over ``elapsed_s``, or since the start."""
        now = self.counts()
        elapsed = elapsed_s if elapsed_s is not None else self.clock() - self.started
        out = []
        for url, (requests, failures) in now.items():
            r0, f0 = (since or {}).get(url, (0, 0))
            n = requests - r0
            out.append({"endpoint": url, "requests": n, "failures": failures - f0,
                        "per_s": round(n / elapsed, 1) if elapsed > 0 else None})
        return out
