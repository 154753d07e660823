"""This node judged by itself, without Prometheus: the exporter's parts built in this process from the exporter's own
flags, and the report of what a sampler took of them.

``diagnose`` on a node with no exporter running and ``run`` beside the command it starts share both::

    source = in_process(exporter_parser("bottleneck-exporter diagnose").parse_args(["--no-collector.gpu"]))
    sampler = Sampler(source, socket.gethostname(), exporter_job())
    sampler.run(window=60, interval=5)
    print(render_text(judged(sampler, "bottleneck", {})))
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from bottleneck_exporter.config import Parser
from bottleneck_exporter.heuristics import CatalogueError
from bottleneck_exporter.verdicts.evaluation import evaluate
from bottleneck_exporter.verdicts.report import Report, sampled
from bottleneck_exporter.verdicts.sampling import InProcessSource, Sampler


def exporter_parser(prog: str, suggest: Sequence[str] = ()) -> Parser:
    """The exporter's part flags (``bottleneck_exporter.parts``); a misspelled flag is matched against
    ``suggest`` (the command's own flags) as well."""
    from bottleneck_exporter.parts import add_arguments

    parser = Parser(prog=prog, add_help=False, suggest=suggest)
    add_arguments(parser)
    return parser


def in_process(args: argparse.Namespace) -> InProcessSource:
    """The collectors and the push receiver, built from the exporter's flags (``args``, with the config file they
    name), to run in this process; raises CatalogueError naming a bad flag or key."""
    from bottleneck_exporter.config import ConfigError, load_yaml
    from bottleneck_exporter.parts import build_parts
    from bottleneck_exporter.training.registry import TrainingRegistry

    try:
        file_config = load_yaml(args.config_file) if args.config_file else {}
        return InProcessSource(build_parts(args, file_config, TrainingRegistry(), args.config_file or ""))
    except ConfigError as error:
        raise CatalogueError(str(error)) from None


def judged(sampler: Sampler, bundle: str, overrides: Mapping[str, object]) -> Report:
    """The report of the rules of ``bundle`` (parameters ``overrides``) over what ``sampler`` took."""
    return sampled(evaluate(sampler.samples(), bundle, overrides), sampler)
