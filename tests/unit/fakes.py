"""Strict fakes at the adapter boundary, fed with JSON captured from a real cluster.

Each fake answers only the calls it was told to expect and fails the test on any other,
the way Rook's mock executor does; it also records what was asked, so tests can check it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rgwkeeper.adapters.cephcli import CompletedRun

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pacific"


def load_fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class UnexpectedCall(AssertionError):
    pass


def _key(cmd: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in cmd.items() if k != "format"}, sort_keys=True)


class FakeRados:
    """Stands in for ``rados.Rados``: answers (osd, command) pairs it was given."""

    def __init__(self) -> None:
        self.answers: dict[tuple[int | None, str], tuple[int, bytes, str]] = {}
        self.calls: list[tuple[int | None, dict[str, Any]]] = []
        self.connected = False
        self.shut_down = False

    def expect(self, cmd: dict[str, Any], out: Any = None, *, osd: int | None = None, ret: int = 0,
               outs: str = "") -> "FakeRados":
        body = b"" if out is None else json.dumps(out).encode()
        self.answers[(osd, _key(cmd))] = (ret, body, outs)
        return self

    def connect(self, timeout: int = 0) -> None:
        self.connected = True

    def shutdown(self) -> None:
        self.shut_down = True

    def _answer(self, osd: int | None, cmd: str) -> tuple[int, bytes, str]:
        parsed = json.loads(cmd)
        if parsed.get("format") != "json":
            raise UnexpectedCall(f"command without format=json: {cmd}")
        self.calls.append((osd, parsed))
        try:
            return self.answers[(osd, _key(parsed))]
        except KeyError:
            raise UnexpectedCall(f"unexpected command to {'osd.%s' % osd if osd is not None else 'mon'}: {cmd}") from None

    def mon_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        return self._answer(None, cmd)

    def mgr_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        raise UnexpectedCall(f"mgr_command was not expected: {cmd}")

    def osd_command(self, osdid: int, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        return self._answer(osdid, cmd)


def rados_from_observation(obs: dict[str, Any], scrub_options: Sequence[str]) -> FakeRados:
    """A FakeRados that answers exactly what :func:`collect_raw` asks, from a fixture."""
    from rgwkeeper.observe import CLUSTER_COMMANDS, DEEP_SCRUB_COMMANDS

    fake = FakeRados()
    for name, cmd in CLUSTER_COMMANDS.items():
        fake.expect(cmd, obs[name])
    for osd, perf in obs["osd_bluefs"].items():
        fake.expect({"prefix": "perf dump", "logger": "bluefs"}, perf, osd=int(osd))
    for osd, opts in obs["osd_config"].items():
        for name in scrub_options:
            fake.expect({"prefix": "config get", "var": name}, {name: opts[name]}, osd=int(osd))
    fake.expect({"prefix": "config get", "who": "client.rgw", "key": "rgw_max_objs_per_shard"},
                obs["rgw_limit"]["rgw_max_objs_per_shard"])
    fake.expect({"prefix": "config get", "who": "client.rgw", "key": "rgw_max_dynamic_shards"},
                obs["reshard_limits"]["rgw_max_dynamic_shards"])
    deep = obs.get("pg_deep_scrub") or load_fixture("deep-scrub.json")["pg_deep_scrub"]
    for name, cmd in DEEP_SCRUB_COMMANDS.items():
        fake.expect(cmd, deep[name])
    return fake


class FakeRunner:
    """Stands in for the radosgw-admin subprocess runner: argv tail -> captured output."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, ...], CompletedRun] = {}
        self.calls: list[tuple[str, ...]] = []

    def expect(self, args: Sequence[str], stdout: str = "", *, returncode: int = 0, stderr: str = "") -> "FakeRunner":
        self.answers[tuple(args)] = CompletedRun(tuple(args), returncode, stdout, stderr, 0.0)
        return self

    async def __call__(self, argv: Sequence[str], timeout: float) -> CompletedRun:
        self.calls.append(tuple(argv))
        for tail, result in self.answers.items():
            if tuple(argv[-len(tail):]) == tail:
                return CompletedRun(tuple(argv), result.returncode, result.stdout, result.stderr, 0.0)
        raise UnexpectedCall(f"unexpected radosgw-admin call: {list(argv)}")


class FakeRGWAdmin:
    """Stands in for ``rgwadmin.RGWAdmin``: request path -> captured JSON."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.answers: dict[tuple[str, str], Any] = {}
        self.calls: list[tuple[str, str]] = []

    def expect(self, method: str, path: str, response: Any) -> "FakeRGWAdmin":
        self.answers[(method, path)] = response
        return self

    def request(self, method: str, path: str, headers: Any = None, data: Any = None) -> Any:
        self.calls.append((method, path))
        try:
            response = self.answers[(method, path)]
        except KeyError:
            raise UnexpectedCall(f"unexpected admin API request: {method.upper()} {path}") from None
        if isinstance(response, BaseException):
            raise response
        return response


class FakeCluster:
    """A stateful stand-in for ``rados.Rados`` for the executor: the mon config database,
    the OSDMap flags and what each OSD reports, with replies shaped as 16.2.15 gives them
    (``config dump`` entries, ``config get`` printing 0.25 as "0.250000"). Strict: any other
    command fails the test. ``revert`` makes OSDs ignore a setting, as mClock does for
    locked options."""

    def __init__(self, osds=(0, 1, 2), defaults=None) -> None:
        self.config: dict[tuple[str, str], str] = {}
        self.flags = {"sortbitwise", "recovery_deletes", "purged_snapdirs", "pglog_hardlimit"}
        self.osds = list(osds)
        self.defaults = {"osd_scrub_sleep": "0.000000", "osd_max_scrubs": "1",
                         "osd_scrub_load_threshold": "0.500000", "osd_mclock_profile": "high_client_ops",
                         "osd_op_queue": "wpq", **(defaults or {})}
        self.revert: set[str] = set()
        self.sent: list[dict[str, Any]] = []

    # rados.Rados surface
    def connect(self, timeout: int = 0) -> None:
        pass

    def shutdown(self) -> None:
        pass

    @staticmethod
    def _fmt(value: str) -> str:
        try:
            f = float(value)
        except ValueError:
            return value
        return value if value.isdigit() else f"{f:.6f}"

    def mon_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        c = json.loads(cmd)
        self.sent.append(c)
        p = c["prefix"]
        if p == "config dump":
            out = [{"section": w, "name": n, "value": self._fmt(v), "level": "advanced",
                    "can_update_at_runtime": True, "mask": ""} for (w, n), v in sorted(self.config.items())]
            return 0, json.dumps(out).encode(), ""
        if p == "config set":
            self.config[(c["who"], c["name"])] = c["value"]
            return 0, b"", ""
        if p == "config rm":
            self.config.pop((c["who"], c["name"]), None)
            return 0, b"", ""
        if p == "osd dump":
            return 0, json.dumps({"flags": ",".join(sorted(self.flags)), "flags_set": sorted(self.flags),
                                  "osds": [{"osd": o, "up": 1, "in": 1} for o in self.osds]}).encode(), ""
        if p in ("osd set", "osd unset"):
            (self.flags.add if p == "osd set" else self.flags.discard)(c["key"])
            return 0, b"", f"{c['key']} is {'set' if p == 'osd set' else 'unset'}"
        raise UnexpectedCall(f"unexpected mon command: {cmd}")

    def mgr_command(self, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        raise UnexpectedCall(f"mgr_command was not expected: {cmd}")

    def osd_command(self, osdid: int, cmd: str, inbuf: bytes, timeout: int = 0) -> tuple[int, bytes, str]:
        c = json.loads(cmd)
        if c["prefix"] != "config get" or osdid not in self.osds:
            raise UnexpectedCall(f"unexpected command to osd.{osdid}: {cmd}")
        name = c["var"]
        value = self.defaults[name] if name in self.revert else self.config.get(("osd", name), self.defaults[name])
        return 0, json.dumps({name: self._fmt(value)}).encode(), ""


class FakeLockCluster:
    """cls_lock's exclusive locks as one OSD keeps them, for several RADOS clients, on an
    injected clock. Measured on 16.2.15: the same locker (client and cookie) re-taking its lock
    without LOCK_FLAG_MAY_RENEW gets EEXIST (``rados.ObjectExists``); another locker gets EBUSY
    (``rados.ObjectBusy``); an expired lock is gone. ``client(n)`` is one connection (a
    ``rados.Rados`` stand-in); ``rados_runner`` answers ``rados lock info`` (shaped like
    fixtures/pacific/rados-lock-info.json) and ``rados lock break``."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.lockers: dict[tuple[str, str], dict[tuple[str, str], tuple[str, float]]] = {}
        self.lose_next_reply = False  # the next lock call lands, but its caller times out
        self.unreachable = False  # every call times out without landing (a mon/OSD outage)

    def _live(self, obj: str, name: str) -> dict[tuple[str, str], tuple[str, float]]:
        lockers = self.lockers.setdefault((obj, name), {})
        for k, (_, expires) in list(lockers.items()):
            if expires <= self.clock():
                del lockers[k]
        return lockers

    def lock(self, client: str, obj: str, name: str, cookie: str, desc: str, duration: int, flags: int) -> None:
        import rados

        if self.unreachable:
            raise rados.TimedOut("Ioctx.rados_lock_exclusive: no reply", errno=110)
        lockers = self._live(obj, name)
        me = (client, cookie)
        if me in lockers and not flags & 1:
            raise rados.ObjectExists(f"Ioctx.rados_lock_exclusive: failed to set lock {name} on {obj}", errno=17)
        if any(k != me for k in lockers):
            raise rados.ObjectBusy(f"Ioctx.rados_lock_exclusive: failed to set lock {name} on {obj}", errno=16)
        lockers[me] = (desc, self.clock() + duration)
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise rados.TimedOut("Ioctx.rados_lock_exclusive: no reply", errno=110)

    def holders(self, obj: str = "rgwkeeper.leader", name: str = "leader") -> list[tuple[str, str, str]]:
        return [(c, k, d) for (c, k), (d, _) in self._live(obj, name).items()]

    def client(self, n: int) -> Any:
        cluster = self

        class Ioctx:
            def lock_exclusive(self, key, name, cookie, desc="", duration=None, flags=0):
                cluster.lock(f"client.{n}", key, name, cookie, desc, duration or 10**9, flags)

            def unlock(self, key, name, cookie):
                cluster._live(key, name).pop((f"client.{n}", cookie), None)

            def set_osdmap_full_try(self):
                self.full_try = True

            def close(self):
                pass

        class Client:
            def connect(self, timeout=0):
                pass

            def shutdown(self):
                pass

            def open_ioctx(self, pool):
                return Ioctx()

        return Client()

    async def rados_runner(self, argv: Sequence[str], timeout: float) -> CompletedRun:
        args = list(argv)
        i = args.index("lock")
        verb, obj, name = args[i + 1:i + 4]
        if verb == "info":
            lockers = [{"name": c, "cookie": k, "description": d, "expiration": "2026-11-23T19:03:08.308173+0000",
                        "addr": "127.0.0.1:0/385445965"} for c, k, d in self.holders(obj, name)]
            out = {"name": name, "type": "exclusive", "tag": "", "lockers": lockers}
            return CompletedRun(tuple(argv), 0, json.dumps(out), "", 0.0)
        if verb == "break":
            client, cookie = args[i + 4], args[args.index("--lock-cookie") + 1]
            self._live(obj, name).pop((client, cookie), None)
            return CompletedRun(tuple(argv), 0, "", "", 0.0)
        raise UnexpectedCall(f"unexpected rados call: {args}")
