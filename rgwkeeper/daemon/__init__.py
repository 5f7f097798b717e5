"""The reconciler service: scheduling, leadership, metrics and systemd integration."""
