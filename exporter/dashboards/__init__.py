"""Grafana dashboards from code: ``python -m bottleneck_exporter.dashboards`` writes one dashboard set per rule bundle.

One module per dashboard (fleet, node, training, verdicts) lays out its panels; ``signals`` draws the heuristics
catalogue's signals as a bundle's sources carry them (or a note naming the source a panel needs); ``panels``
builds the JSON; ``variables`` holds the node, job and GPU variables that several dashboards offer; ``files``
says which file each bundle's dashboards go to, and renders them. Never imported by the exporter daemon.
"""
