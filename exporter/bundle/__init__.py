"""The bundle a Prometheus, an Alertmanager and a Grafana load, as the wheel carries it, and the ``bundle``
subcommand that writes it out.

    bottleneck-exporter bundle list                              the bundles, one a line
    bottleneck-exporter bundle write DIR [--bundle NAME]         DIR/prometheus, DIR/alertmanager, DIR/grafana, ...

The files are the committed ones (``make generate`` writes the rules, promtool tests and dashboards from the
catalogue; the Alertmanager config, its templates, the Grafana provisioning and the GPU profiles are written by
hand), read through importlib.resources from ``as-committed/`` beside this module: links to the repository's
folders in a checkout (an editable install reads them in place), copies in the wheel. ``layout`` says which file
goes where in DIR, ``writer`` writes them without clobbering a person's edits, ``command`` is the command line.
"""
