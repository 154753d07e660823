"""The verdict engine: the catalogue's rules judged over samples of the exporters, or by a Prometheus.

``diagnose``, the status page and ``run`` share it, one module a job:

* ``scrape``: the one bounded HTTP read of an exposition;
* ``peers``: node_exporter and dcgm-exporter beside ours, and every sample labelled as a Prometheus scrape
  labels it;
* ``sampling``: our exporter (over HTTP, or the collectors and push receiver in this process) and its peers,
  sampled together (``Sampler``);
* ``evaluation``: every alert expression over the samples, how long each held judged over the sample times
  (``evaluate``, ``Finding``, ``Held``);
* ``prometheus``: the same rules as instant queries of a Prometheus;
* ``breakdown``: what the samples show besides the verdicts: each rank's step split into its phases, each GPU's
  utilization;
* ``bars``: the unicode-block bars the text report draws them with;
* ``report``: what was read, measured and found (``Report``), as text or JSON.

A run of the engine, as ``diagnose`` does it without a Prometheus::

    sampler = Sampler(HttpSource("http://127.0.0.1:9847/metrics"), socket.gethostname(), exporter_job())
    sampler.run(window=60, interval=5)
    print(render_text(sampled(evaluate(sampler.samples(), "bottleneck"), sampler), longer="sample longer"))
"""
