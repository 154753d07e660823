"""The wire format between the training hook and the exporter's push receiver, written once for both sides.

``schema`` (the datagram: version, keys, phase names, step-time buckets, label limits, and its validation),
``encode`` (how the hook writes one), ``paths`` (where the push socket lives, where the hook may send).
Standard library only: the hook imports this package inside training processes, where nothing of the daemon
(prometheus_client, YAML, the collectors) may load, and the daemon imports it without torch.
"""
