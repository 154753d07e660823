"""The training engine of the daemon: which processes on this node train, and what their threads cost.

``discovery`` finds trainers and their DataLoader workers from /proc, ``ledger`` keeps each trainer's
per-thread-role counters monotonic across scrapes, ``registry`` holds the trainers the push receiver was
told about. ``bottleneck_exporter.collectors.training`` turns them into series; nothing here imports
prometheus_client.
"""
