"""Adapters: the only code that talks to Ceph (librados, radosgw-admin, admin API, S3)."""
