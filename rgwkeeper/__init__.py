"""rgwkeeper: keeps a large Ceph RGW cluster fast while it fills."""

__version__ = "0.1.0"
