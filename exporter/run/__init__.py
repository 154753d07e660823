"""``bottleneck-exporter run``: a training command run unchanged, with automatic instrumentation, and a report of
what holds it back when it exits (docs/run.md). One module a job:

* ``command``: the command line, and one run from start to report;
* ``child``: the command as a child process (its terminal, the signals meant for it, its exit status);
* ``autoload``: the ``sitecustomize`` directory put first on the command's ``PYTHONPATH``, which starts
  ``bottleneck_exporter.hook.auto`` in each of its Python interpreters;
* ``statusline``: the line redrawn on a terminal while the command runs;
* ``coverage``: what the samples say the instrumentation could not see.
"""
