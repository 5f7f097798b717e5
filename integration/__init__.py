"""Test harness: a real, containerized Ceph cluster driven by the docker SDK."""
