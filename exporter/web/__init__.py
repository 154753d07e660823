"""The HTTP side of the daemon: the server and its routes (``server``), the exporter-toolkit web config file with
TLS, mutual TLS and basic auth (``config``)."""
