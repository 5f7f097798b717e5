"""The demo's own parts that need no cluster: the config it hands every rgwkeeper step."""

from __future__ import annotations

from pathlib import Path

from integration.cluster import ClusterInfo
from integration.demo import HIGH_WRITE_OPS, LOW_WRITE_OPS, Demo
from rgwkeeper import config


def test_the_demo_config_is_one_rgwkeeper_accepts_with_the_demo_thresholds(tmp_path: Path) -> None:
    info = ClusterInfo(conf=tmp_path / "ceph.conf", keyring=tmp_path / "keyring", rgw_endpoint="http://127.0.0.1:7480",
                       credentials_file=tmp_path / "s3.toml", external=False)
    demo = Demo(info, tmp_path, objects=10, purge_objects=10)
    demo.write_config(metrics_port=9999)
    cfg = config.load(demo.config, required=True)
    assert cfg.scrub_throttle.high_write_ops == HIGH_WRITE_OPS and cfg.scrub_throttle.low_write_ops == LOW_WRITE_OPS
    assert cfg.daemon.metrics_address == "127.0.0.1:9999" and cfg.daemon.instance_id == "demo"
    # Everything the demo writes stays in its directory: no /run or /var/lib on the host.
    assert Path(cfg.daemon.state_dir).parent == tmp_path and Path(cfg.purge.state_dir).parent == tmp_path
    assert cfg.spillover.enabled is False and cfg.preshard.daemon_reshards is False
