"""bottleneck-exporter: tells why deep-learning training is slower than it should be.

The daemon side of this package never imports torch; only ``bottleneck_exporter.hook`` (loaded inside a
training process) does.
"""

__version__ = "0.1.0"
