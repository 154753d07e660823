"""The push receiver: per-step timings that the in-process hook (``bottleneck_exporter.hook``) sends to this exporter.

Modules: ``settings`` (its registered options: ``--push.*`` flags, ``push:`` config, and ``build_receiver``),
``receiver`` (socket thread, collector), ``store`` (bounded job/rank table), ``exposition`` (metric families); the
datagram and the socket paths it shares with the hook are ``bottleneck_exporter.wire``, so the hook never imports
this package. The daemon runs the receiver as one of its parts (``bottleneck_exporter.parts``): started and
stopped with it, with its own ``bottleneck_scrape_collector_success{collector="push"}``.
"""
