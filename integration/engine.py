"""Find a Docker engine, or start one of our own and stop it by PID afterwards.

No engine runs by default on the machines this project is tested on (docs/testing.md), and no
registry can be reached. When nothing answers, we start ``dockerd`` with its own data root,
exec root, socket and pid file, the flags measured to work here:
``--iptables=false --ip6tables=false --bridge=none`` (containers use host networking).
The data root lives in the persistent cache directory so a built image survives runs.

Several test sessions on one host share that engine: an ``flock`` on the cache directory
guards only starting and stopping it. The first session starts it; each session registers
itself (a file named by its PID under ``engine/users``) and, when it finishes, stops it only
if no other live process is registered and no test container of a live process remains
(last one out stops it, by the PID in its pid file, never by name). Containers alone were not
enough: a session between two clusters (building or importing the next release's image) has
none, and another session's stop cut its import off.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker

from integration.errors import HarnessError

DOCKERD_START_TIMEOUT_S = 60.0
DOCKERD_STOP_TIMEOUT_S = 30.0
LOCK_WAIT_S = 120.0
#: Labels every test container carries (set by integration.cluster).
LABEL = "io.rgwkeeper.test"
OWNER_LABEL = "io.rgwkeeper.test.owner-pid"


def _ping(base_url: str, timeout: float = 3.0) -> bool:
    try:
        client = docker.DockerClient(base_url=base_url, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no engine answers here"
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Engine:
    """A Docker engine the harness talks to; ``owned`` means we started it.

    Within one process the engine is shared (a test may boot a second cluster while the
    session's runs): each :func:`find_or_start` takes a reference, each :meth:`stop` drops
    one, and the last one stops the engine.
    """

    base_url: str
    owned: bool
    pid: int | None = None
    log: Path | None = None
    lock_path: Path | None = None
    #: Where live sessions register (a managed engine only).
    users_dir: Path | None = None
    _refs: int = field(default=1, repr=False)

    def client(self, timeout: float = 120.0) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.base_url, timeout=int(timeout))

    def stop(self) -> None:
        """Drop a reference; the last one stops a managed engine unless others still use it."""
        global _SHARED
        self._refs -= 1
        if self._refs > 0:
            return
        if _SHARED is self:
            _SHARED = None
        if not self.owned or self.pid is None or self.lock_path is None:
            return
        fd = _acquire_lock(self.lock_path, LOCK_WAIT_S)
        try:
            if self.users_dir is not None:
                (self.users_dir / str(os.getpid())).unlink(missing_ok=True)
            if not other_users(self.users_dir) and not self._others_running():
                _terminate_pid(self.pid, DOCKERD_STOP_TIMEOUT_S)
        finally:
            _release_lock(fd)

    def _others_running(self) -> bool:
        """Does a test container of another live process still run on this engine?"""
        try:
            client = self.client(timeout=30)
            try:
                containers = client.containers.list(all=True, filters={"label": LABEL})
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - an engine that does not answer is nobody's
            return False
        for c in containers:
            owner = c.labels.get(OWNER_LABEL, "")
            if owner.isdigit() and int(owner) != os.getpid() and _pid_alive(int(owner)):
                return True
        return False


def register_user(users_dir: Path) -> None:
    """Say this process uses the engine (call with the engine lock held)."""
    users_dir.mkdir(parents=True, exist_ok=True)
    (users_dir / str(os.getpid())).touch()


def other_users(users_dir: Path | None) -> bool:
    """Is another live process registered? Files of processes that are gone are removed."""
    if users_dir is None or not users_dir.is_dir():
        return False
    found = False
    for f in users_dir.iterdir():
        if not f.name.isdigit() or int(f.name) == os.getpid():
            continue
        if _pid_alive(int(f.name)):
            found = True
        else:
            f.unlink(missing_ok=True)
    return found


def _terminate_pid(pid: int, timeout: float) -> None:
    if not _pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Reap it if it is our child; otherwise just poll.
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return
        if not _pid_alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _release_lock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _acquire_lock(path: Path, wait_s: float) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise HarnessError(
                    "docker engine lock",
                    f"another test session has held {path} for {wait_s:.0f} s while starting or stopping the engine",
                ) from None
            time.sleep(1.0)


_SHARED: Engine | None = None


def find_or_start(cache_dir: Path) -> Engine:
    """Use ``DOCKER_HOST`` or the system socket if an engine answers; else start our own."""
    global _SHARED
    if _SHARED is not None and _ping(_SHARED.base_url):
        _SHARED._refs += 1
        return _SHARED
    _SHARED = _find_or_start(cache_dir)
    return _SHARED


def _find_or_start(cache_dir: Path) -> Engine:
    cache_dir.mkdir(parents=True, exist_ok=True)
    explicit = os.environ.get("DOCKER_HOST")
    if explicit:
        if not _ping(explicit):
            raise HarnessError("docker engine", f"DOCKER_HOST={explicit} does not answer")
        return Engine(base_url=explicit, owned=False)
    if Path("/var/run/docker.sock").exists() and _ping("unix:///var/run/docker.sock"):
        return Engine(base_url="unix:///var/run/docker.sock", owned=False)

    lock_path = cache_dir / "engine.lock"
    lock_fd = _acquire_lock(lock_path, LOCK_WAIT_S)
    try:
        running = _running_managed_engine(cache_dir)
        if running is not None:
            pid, base_url = running
            engine = Engine(base_url=base_url, owned=True, pid=pid, log=cache_dir / "engine" / "dockerd.log",
                            lock_path=lock_path)
        else:
            engine = _start_dockerd(cache_dir, lock_path)
        engine.users_dir = cache_dir / "engine" / "users"
        register_user(engine.users_dir)
        return engine
    finally:
        _release_lock(lock_fd)


def _running_managed_engine(cache_dir: Path) -> tuple[int, str] | None:
    """The engine another session of ours started, if it still runs and answers."""
    state = cache_dir / "engine"
    with contextlib.suppress(ValueError, OSError):
        pid = int((state / "docker.pid").read_text().strip())
        url = f"unix://{state / 'docker.sock'}"
        if _pid_alive(pid) and _cmdline(pid) == "dockerd" and _ping(url):
            return pid, url
    return None


def _start_dockerd(cache_dir: Path, lock_path: Path) -> Engine:
    state = cache_dir / "engine"
    state.mkdir(parents=True, exist_ok=True)
    # The exec root holds unix sockets, whose paths must stay under 108 bytes.
    exec_root = Path(f"/run/rgwkeeper-test-docker-{os.getuid()}")
    sock = state / "docker.sock"
    pidfile = state / "docker.pid"
    log = state / "dockerd.log"

    # A previous session that was killed may have left its engine running but not
    # answering: we hold the lock now, so whatever its pid file names is ours to stop.
    if pidfile.exists():
        with contextlib.suppress(ValueError, OSError):
            stale = int(pidfile.read_text().strip())
            if _pid_alive(stale) and _cmdline(stale).startswith("dockerd"):
                _terminate_pid(stale, DOCKERD_STOP_TIMEOUT_S)
        pidfile.unlink(missing_ok=True)
    sock.unlink(missing_ok=True)

    dockerd = _which("dockerd")
    storage_driver = os.environ.get("RGWKEEPER_TEST_STORAGE_DRIVER", "overlay2")
    argv = [
        dockerd,
        f"--storage-driver={storage_driver}",
        "--iptables=false",
        "--ip6tables=false",
        "--bridge=none",
        f"--data-root={state / 'data'}",
        f"--exec-root={exec_root}",
        "-H",
        f"unix://{sock}",
        f"--pidfile={pidfile}",
    ]
    with open(log, "ab") as logf:
        logf.write(f"\n== {time.strftime('%F %T')} starting {' '.join(argv)}\n".encode())
        logf.flush()
        proc = subprocess.Popen(  # noqa: S603 - fixed argv
            argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    engine = Engine(base_url=f"unix://{sock}", owned=True, pid=proc.pid, log=log, lock_path=lock_path)
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError("docker engine start", f"dockerd exited with {proc.returncode}", log)
        if sock.exists() and _ping(engine.base_url, timeout=2.0):
            return engine
        time.sleep(0.3)
    _terminate_pid(proc.pid, DOCKERD_STOP_TIMEOUT_S)
    raise HarnessError(
        "docker engine start", f"dockerd did not answer within {DOCKERD_START_TIMEOUT_S:.0f} s", log
    )


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return os.path.basename(raw.split(b"\0", 1)[0].decode(errors="replace"))


def _which(name: str) -> str:
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"):
        p = Path(d) / name
        if p.exists():
            return str(p)
    raise HarnessError("docker engine start", f"{name} is not installed (run scripts/setup-host.sh)")

