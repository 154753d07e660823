"""The verdict engine: the catalogue's rules judged without a Prometheus, over samples this process takes.

``diagnose``, the status page and ``run`` share it: ``scrape`` (the one bounded HTTP read of an exposition),
``peers`` (node_exporter and dcgm-exporter beside ours, and every sample labelled as a Prometheus scrape labels it).
"""
