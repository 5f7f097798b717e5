"""An admin node with a real systemd as PID 1, in a container beside the Ceph one.

The tests install ``systemd/rgwkeeper.service`` into it as docs/operations.md says and drive it
with ``systemctl`` and ``journalctl``. No host here runs systemd (the machines boot another init,
docs/testing.md), so the harness boots one:

- the image is the Pacific (bookworm) Ceph image plus Debian's ``systemd``: the same ceph-common
  and python3-rados the host's clients come from, so the project's venv (made by
  scripts/setup-host.sh with that ``/usr/bin/python3``) runs inside unchanged. It is built once
  (an ``apt-get install`` in a container of the Ceph image, then ``docker commit``) and cached
  under a tag derived from its recipe;
- the container runs ``/lib/systemd/systemd`` privileged (systemd mounts its cgroup hierarchy and
  the unit's hardening makes namespaces), on the host network (the cluster's mon and RGW listen
  on 127.0.0.1), with tmpfs on /run and /tmp, and the checkout mounted read-only at its own path,
  so the venv's scripts find their interpreter;
- it is stopped and removed by id, and carries the labels the Ceph containers carry, so a session
  that died leaves nothing a later one does not sweep.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from integration import engine as engine_mod
from integration import image as image_mod
from integration.errors import HarnessError

REPOSITORY = "rgwkeeper-systemd"
PACKAGES = ("systemd", "systemd-sysv")
# Bump when the steps below change in a way PACKAGES does not show.
RECIPE_REVISION = "1"
BUILD_TIMEOUT_S = 900.0
BOOT_TIMEOUT_S = 120.0
#: What systemd and the unit's sandboxing need. Not ``privileged``: that asks for every
#: capability, and runc fails where the host's own bounding set lacks one (CAP_SYS_RESOURCE on
#: these machines: "unable to apply caps: operation not permitted").
CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_CHROOT", "SETPCAP",
                "MKNOD", "AUDIT_CONTROL", "SYS_NICE", "IPC_LOCK", "LINUX_IMMUTABLE", "SYSLOG")


def recipe_tag(base: str) -> str:
    recipe = "\n".join([RECIPE_REVISION, base, *PACKAGES])
    return f"{REPOSITORY}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def ensure_image(client: docker.DockerClient, cache_dir: Path) -> str:
    """The systemd image, built on the bookworm Ceph image if it is not in the engine yet."""
    base = image_mod.ensure_image(client, cache_dir, image_mod.HOST_SUITE)
    tag = recipe_tag(base)
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(tag)
        return tag
    log = cache_dir / "build" / f"{tag.replace(':', '_')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    script = ("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
              f"apt-get install -y -qq --no-install-recommends {' '.join(PACKAGES)}; "
              "apt-get clean; rm -rf /var/lib/apt/lists/*")
    container = client.containers.run(base, ["/bin/bash", "-c", script], detach=True, network_mode="host",
                                      labels={engine_mod.LABEL: "1", engine_mod.OWNER_LABEL: str(os.getpid())})
    try:
        try:
            code = container.wait(timeout=BUILD_TIMEOUT_S)["StatusCode"]
        except Exception:  # noqa: BLE001 - the SDK raises the transport's timeout
            raise HarnessError("systemd image build", f"apt-get still running after {BUILD_TIMEOUT_S:.0f} s", log) from None
        log.write_bytes(container.logs())
        if code != 0:
            raise HarnessError("systemd image build", f"apt-get exit code {code}", log)
        repository, _, version = tag.partition(":")
        container.commit(repository=repository, tag=version,
                         changes=['CMD ["/lib/systemd/systemd"]', "ENV container=docker"])
    finally:
        container.remove(force=True)
    return tag


@dataclass
class Exec:
    argv: list[str]
    exit_code: int
    output: str

    def check(self) -> str:
        if self.exit_code != 0:
            raise HarnessError("systemd host", f"{' '.join(self.argv)} exited {self.exit_code}: {self.output[-2000:]}")
        return self.output


class SystemdHost:
    """One container booted with systemd as PID 1. Use as a context manager."""

    def __init__(self, client: docker.DockerClient, image: str, *, mounts: dict[str, str]) -> None:
        self.client, self.image, self.mounts = client, image, mounts
        self.container = None

    def __enter__(self) -> SystemdHost:
        try:
            self.container = self.client.containers.run(
                self.image, ["/lib/systemd/systemd"], detach=True, network_mode="host", cap_add=list(CAPABILITIES),
                security_opt=["seccomp=unconfined", "apparmor=unconfined"],
                cgroupns="host", tmpfs={"/run": "", "/run/lock": "", "/tmp": ""},
                volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"},
                         **{src: {"bind": dst, "mode": "ro"} for src, dst in self.mounts.items()}},
                environment={"container": "docker"}, stop_signal="SIGRTMIN+3",
                labels={engine_mod.LABEL: "1", engine_mod.OWNER_LABEL: str(os.getpid())},
                name=f"rgwkeeper-test-systemd-{os.getpid()}-{int(time.time())}")
            self._wait_booted()
            return self
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_booted(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            self.container.reload()
            if self.container.status not in ("created", "running"):
                raise HarnessError("systemd host", f"container {self.container.status}: "
                                   f"{self.container.logs()[-2000:].decode(errors='replace')}")
            state = self.run("systemctl", "is-system-running").output.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise HarnessError("systemd host", f"systemd still {state or 'starting'} after {BOOT_TIMEOUT_S:.0f} s: "
                           f"{self.run('systemctl', '--failed', '--no-pager').output}")

    def run(self, *argv: str, user: str = "root", timeout_s: float = 120.0) -> Exec:
        """``argv`` inside, killed after ``timeout_s`` (coreutils' timeout: exit 124, or 137 if
        it had to SIGKILL), so a wedged systemctl fails the test instead of hanging it."""
        assert self.container is not None
        wrapped = ["timeout", "--kill-after=5", f"{timeout_s:g}", *argv]
        code, out = self.container.exec_run(wrapped, user=user, demux=False)
        text = (out or b"").decode(errors="replace")
        if code in (124, 137):
            text += f"\n(killed: still running after {timeout_s:g} s)"
        return Exec(list(argv), code, text)

    def write(self, path: str, text: str, *, mode: str = "0644", owner: str = "root:root") -> None:
        """Install a file inside: its text never reaches an argv (it may be a key)."""
        assert self.container is not None
        data = text.encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("f")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        # Staged in the image layer: the archive API does not reach into the tmpfs mounts.
        tmp = f"/var/tmp/rgwkeeper-install-{os.getpid()}"
        self.run("mkdir", "-p", tmp).check()
        if not self.container.put_archive(tmp, buf.getvalue()):
            raise HarnessError("systemd host", f"could not copy {path} in")
        self.run("install", "-D", "-m", mode, "-o", owner.split(":")[0], "-g", owner.split(":")[1],
                 f"{tmp}/f", path).check()
        self.run("rm", "-rf", tmp).check()

    def show(self, unit: str, *props: str) -> dict[str, str]:
        deadline = time.monotonic() + 10
        while True:
            r = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props))
            values = dict(line.split("=", 1) for line in r.output.splitlines() if "=" in line)
            if r.exit_code == 0 and set(props) <= set(values):
                return values
            # Once seen: an answer without the properties asked, right after a stop.
            if time.monotonic() > deadline:
                raise HarnessError("systemd host", f"systemctl show {unit} exit {r.exit_code} did not give "
                                   f"{sorted(set(props) - set(values))}: {r.output[-1000:]!r}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.container is None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            with contextlib.suppress(docker.errors.APIError):
                self.container.kill()
            self.container.remove(force=True)
        self.container = None
