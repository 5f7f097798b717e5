"""The Ceph image for the tests: built locally, cached under a tag derived from the recipe.

No container registry can be reached here (docs/testing.md), so the image is made from a Debian
suite's own packages (bookworm: Pacific 16.2.15, the same release the host's clients come from):
``debootstrap --variant=minbase``, then ``apt-get install`` inside the chroot (installing
through debootstrap's ``--include`` leaves the Ceph packages unconfigured), then
``tar | docker import``. Measured here: about 35 s debootstrap, a few minutes of apt, 12 s
import, ~660 MB.

``ClusterOptions(suite="trixie")`` builds the same recipe from trixie: Reef 18.2.7 when measured
(about 65 s to build here, 33 s to boot). ``sid`` builds Tentacle 20.2.4 (about 145 s to build
here, 718 MB, 35-37 s to boot), with the three extra steps of a rolling suite (ROLLING_SUITES).
The test session's default release is Tentacle (DEFAULT_RELEASE, the release matrix in
integration/pytest_plugin.py); ``ClusterOptions()`` outside the tests (``python -m integration up``,
bench/, the fixture captures) stays the host's Pacific. ``RGWKEEPER_TEST_RELEASE=pacific|reef|tentacle``
(or the older ``RGWKEEPER_TEST_DEBIAN_SUITE=bookworm|trixie|sid``) picks the release for both.

``RGWKEEPER_CEPH_IMAGE`` names another image instead (for example an upstream
``quay.io/ceph/ceph`` tag where a registry is reachable); it is pulled if absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import docker
import docker.errors

from integration.errors import HarnessError

# The host's clients come from bookworm (Pacific 16.2.15). trixie's packages are Reef 18.2.7 and
# sid's Tentacle 20.2.4 (measured).
HOST_SUITE = "bookworm"
RELEASE_SUITES = {"tentacle": "sid", "reef": "trixie", "pacific": HOST_SUITE}
DEFAULT_RELEASE = "tentacle"


def chosen_release() -> str | None:
    """The release the environment picks for the session (RGWKEEPER_TEST_RELEASE, or the suite
    RGWKEEPER_TEST_DEBIAN_SUITE names), or None when it picks none."""
    release = os.environ.get("RGWKEEPER_TEST_RELEASE", "").strip().lower()
    if release:
        return release
    suite = os.environ.get("RGWKEEPER_TEST_DEBIAN_SUITE", "").strip()
    return release_of(suite) if suite else None


def release_of(suite: str) -> str:
    """The release a suite's packages carry; an unknown suite is named by itself."""
    return next((r for r, s in RELEASE_SUITES.items() if s == suite), suite)


def suite_of(release: str) -> str:
    return RELEASE_SUITES.get(release, release)


#: The suite ClusterOptions() boots when nothing names one (the test matrix names its own).
SUITE = suite_of(chosen_release() or release_of(HOST_SUITE))
MIRROR = os.environ.get("RGWKEEPER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = (
    "ceph-mon",
    "ceph-mgr",
    "ceph-osd",
    "radosgw",
    "ceph-common",
    "uuid-runtime",
    "procps",
)
# Bump when the build steps change in a way the package list does not show.
RECIPE_REVISION = "1"
REPOSITORY = "rgwkeeper-ceph"
# A rolling suite has no -updates or -security suite, and the mirror's sid Release file is
# past its Valid-Until (measured 2026-11-23; apt refuses it as expired). debootstrap checks
# the signature only, not Valid-Until.
ROLLING_SUITES = frozenset({"sid"})
APT_NO_VALID_UNTIL = ("-o", "Acquire::Check-Valid-Until=false")
# sid's cryptsetup-bin (a ceph-volume dependency) fails its postinst without /proc
# (systemd-tmpfiles), leaving ceph-osd unconfigured: its chroot gets /proc while apt runs.
MOUNT_PROC = "mount proc on /proc for apt"

DEBOOTSTRAP_TIMEOUT_S = 900
APT_TIMEOUT_S = 1500
IMPORT_TIMEOUT_S = 600


def _apt_options(suite: str) -> tuple[str, ...]:
    return APT_NO_VALID_UNTIL if suite in ROLLING_SUITES else ()


def _sources(suite: str) -> str:
    if suite in ROLLING_SUITES:
        return f"deb {MIRROR} {suite} main\n"
    # Security and updates too: a bookworm image runs the same build as the host's
    # ceph/radosgw-admin clients.
    return (f"deb {MIRROR} {suite} main\n"
            f"deb {MIRROR} {suite}-updates main\n"
            f"deb {MIRROR.replace('/debian', '/debian-security')} {suite}-security main\n")


def recipe_tag(suite: str = SUITE) -> str:
    # A rolling suite's own steps join the recipe; the others' tags stay what they were.
    quirks = [_sources(suite), *_apt_options(suite), MOUNT_PROC] if suite in ROLLING_SUITES else []
    recipe = "\n".join([RECIPE_REVISION, suite, MIRROR, *PACKAGES, *quirks])
    return f"{REPOSITORY}:{suite}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def ensure_image(client: docker.DockerClient, cache_dir: Path, suite: str = SUITE) -> str:
    """Return an image reference that exists in the engine, building it if needed."""
    # The override replaces SUITE's image (the chosen release's); the others are built from their recipes.
    override = os.environ.get("RGWKEEPER_CEPH_IMAGE") if suite == SUITE else None
    if override:
        try:
            client.images.get(override)
        except docker.errors.ImageNotFound:
            try:
                client.images.pull(override)
            except docker.errors.APIError as exc:
                raise HarnessError(
                    "image pull", f"RGWKEEPER_CEPH_IMAGE={override}: {exc.explanation}"
                ) from None
        return override

    tag = recipe_tag(suite)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    build_image(client, cache_dir, tag, suite)
    return tag


def _run(step: str, argv: list[str], log: Path, timeout: float, env: dict | None = None) -> None:
    with open(log, "ab") as logf:
        logf.write(f"\n== {time.strftime('%F %T')} {step}: {' '.join(argv)}\n".encode())
        logf.flush()
        try:
            proc = subprocess.run(  # noqa: S603 - argv list, no shell
                argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                timeout=timeout, env=env, check=False,
            )
        except subprocess.TimeoutExpired:
            raise HarnessError(f"image build ({step})", f"timed out after {timeout:.0f} s", log) from None
    if proc.returncode != 0:
        raise HarnessError(f"image build ({step})", f"exit code {proc.returncode}", log)


def build_image(client: docker.DockerClient, cache_dir: Path, tag: str, suite: str = SUITE) -> None:
    if os.geteuid() != 0:
        raise HarnessError("image build", "debootstrap and chroot need root")
    if not shutil.which("debootstrap"):
        raise HarnessError("image build", "debootstrap is not installed (run scripts/setup-host.sh)")
    build_dir = cache_dir / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir / f"{tag.replace(':', '_')}.log"
    root = build_dir / f"root-{os.getpid()}"
    # Roots left by a build that was killed (its pid is gone) are ours to delete.
    for stale in build_dir.glob("root-*"):
        pid = stale.name.removeprefix("root-")
        if pid.isdigit() and (int(pid) == os.getpid() or not Path(f"/proc/{pid}").exists()):
            if _unmount_proc(stale):
                shutil.rmtree(stale, ignore_errors=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    try:
        _run("debootstrap", ["debootstrap", "--variant=minbase", suite, str(root), MIRROR],
             log, DEBOOTSTRAP_TIMEOUT_S, env)
        (root / "etc/apt/sources.list").write_text(_sources(suite))
        shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
        # Keep package scripts from trying to start services inside the chroot.
        rc = root / "usr/sbin/policy-rc.d"
        rc.write_text("#!/bin/sh\nexit 101\n")
        rc.chmod(0o755)
        if suite in ROLLING_SUITES:
            _run("mount /proc", ["mount", "-t", "proc", "proc", str(root / "proc")], log, 30, env)
        apt = ["chroot", str(root), "apt-get", *_apt_options(suite)]
        _run("apt-get update", [*apt, "update", "-qq"], log, APT_TIMEOUT_S, env)
        _run(
            "apt-get install",
            [*apt, "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
            log, APT_TIMEOUT_S, env,
        )
        _run("apt-get clean", ["chroot", str(root), "apt-get", "clean"], log, 120, env)
        if not _unmount_proc(root):
            raise HarnessError("image build (umount /proc)", f"{root / 'proc'} is still mounted", log)
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "etc/resolv.conf").unlink(missing_ok=True)
        _import(client, root, tag, log)
    finally:
        # Never delete through a mounted /proc; a root left mounted is swept by a later build.
        if _unmount_proc(root):
            shutil.rmtree(root, ignore_errors=True)


def _unmount_proc(root: Path) -> bool:
    """Unmount the build root's /proc if mounted; True once nothing is mounted there."""
    proc = root / "proc"
    if os.path.ismount(proc):
        subprocess.run(["umount", "--lazy", str(proc)], capture_output=True, timeout=60, check=False)  # noqa: S603,S607
    return not os.path.ismount(proc)


def _import(client: docker.DockerClient, root: Path, tag: str, log: Path) -> None:
    repository, _, version = tag.partition(":")
    with open(log, "ab") as logf:
        logf.write(f"\n== {time.strftime('%F %T')} docker import as {tag}\n".encode())
        tar = subprocess.Popen(  # noqa: S603
            ["tar", "--numeric-owner", "-C", str(root), "-c", "."],
            stdout=subprocess.PIPE, stderr=logf, stdin=subprocess.DEVNULL,
        )
        try:
            assert tar.stdout is not None
            stdout = tar.stdout
            # A generator of large chunks: given the pipe itself, requests iterates it by
            # lines, a few hundred bytes a read (measured: 1.5 MB/s instead of ~50 MB/s).
            chunks = iter(lambda: stdout.read(1 << 20), b"")
            client.api.import_image(src=chunks, repository=repository, tag=version, stream_src=True)
        except docker.errors.APIError as exc:
            tar.kill()
            raise HarnessError("image build (docker import)", str(exc.explanation), log) from None
        finally:
            try:
                tar.wait(timeout=IMPORT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                tar.kill()
    if tar.returncode != 0:
        raise HarnessError("image build (tar)", f"exit code {tar.returncode}", log)
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        raise HarnessError("image build (docker import)", f"{tag} is not in the engine afterwards", log) from None
