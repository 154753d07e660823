"""The bundle a Prometheus, an Alertmanager and a Grafana load, as the wheel carries it.

The files are the committed ones (``make generate`` writes the rules, promtool tests and dashboards from the
catalogue; the Alertmanager config, its templates, the Grafana provisioning and the GPU profiles are written by
hand), read through importlib.resources from ``as-committed/`` beside this module: links to the repository's
folders in a checkout (an editable install reads them in place), copies in the wheel.
"""
