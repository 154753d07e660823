"""Bottleneck heuristics: the catalogue of verdicts and everything generated from it.

``catalogue`` holds every verdict once (PromQL, thresholds, advice); ``generate`` writes the Prometheus
rules, the runbook and the promtool tests from it; ``scenarios`` is the table of input series and
expected verdicts that tests both the rules (through promtool) and ``promql`` (the Python evaluator
``diagnose`` uses without a Prometheus).
"""
