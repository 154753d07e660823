"""Kubernetes identity: which pod and container a training process or a GPU belongs to.

Two readers, one per outside source: ``cgroup`` (``/proc/PID/cgroup`` → pod UID and container ID) with
``podlogs`` (the kubelet's log directory → names), and ``podresources`` (the kubelet's pod-resources gRPC
API → which container holds which GPU). Nothing here talks to the Kubernetes API server.
"""
