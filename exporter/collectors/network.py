"""Network traffic per interface, link speed and state, and InfiniBand port counters, rate and state.

Reads /proc/net/dev (counters), /sys/class/net/<device>/{speed,operstate} and
/sys/class/infiniband/<hca>/ports/<port>/{rate,state,counters/*}. The loopback is left out by
``device-exclude``; ``device-include`` adds interfaces back. ::

    bottleneck_network_receive_bytes_total{device="eth0"} 9.1325112e+07
    bottleneck_network_speed_bytes{device="eth0"} 1.25e+09
    bottleneck_infiniband_port_received_bytes_total{device="mlx5_0",port="1"} 4.0e+12
    bottleneck_infiniband_port_speed_bytes{device="mlx5_0",port="1"} 2.5e+10
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.collectors.devicefilter import DeviceFilter, device_filter_options
from bottleneck_exporter.procfs import list_dir, read_count, read_int, read_net_dev, read_rate, read_text

DEFAULT_EXCLUDE = r"^lo$"

# (column of /proc/net/dev after "name:", metric, help). Receive columns come first, transmit from column 8.
_COUNTERS = (
    (0, "bottleneck_network_receive_bytes_total", "Bytes received"),
    (1, "bottleneck_network_receive_packets_total", "Packets received"),
    (2, "bottleneck_network_receive_errors_total", "Receive errors reported by the driver"),
    (3, "bottleneck_network_receive_drop_total", "Received packets dropped (no buffer, full backlog, ...)"),
    (8, "bottleneck_network_transmit_bytes_total", "Bytes transmitted"),
    (9, "bottleneck_network_transmit_packets_total", "Packets transmitted"),
    (10, "bottleneck_network_transmit_errors_total", "Transmit errors reported by the driver"),
    (11, "bottleneck_network_transmit_drop_total", "Packets dropped on transmit"),
)

# /sys/class/net/<dev>/speed is in Mb/s (10^6 bit/s). Drivers that do not know print -1 (older kernels
# printed it unsigned) or the read fails with EINVAL (virtual devices, links that are down).
_BYTES_PER_MEGABIT = 1_000_000 // 8
_SPEED_UNKNOWN = (-1, 0xFFFFFFFF)

# port_rcv_data / port_xmit_data are "data octets, divided by 4 (lanes)" (Documentation/ABI/stable/
# sysfs-class-infiniband; mlx5 reports its octet counters shifted right by 2), so bytes = value x 4.
_INFINIBAND_BYTES_PER_UNIT = 4

# (file under ports/<port>/counters, metric, help, multiplier). NCCL over verbs shows only here, never in
# /proc/net/dev; errors, discards and transmit wait (congestion: data queued but no credits to send) are
# what tells a slow all-reduce caused by the fabric from one caused by the GPUs.
_INFINIBAND_COUNTERS = (
    ("port_rcv_data", "bottleneck_infiniband_port_received_bytes_total",
     "Data received on an InfiniBand port (port_rcv_data x 4).", _INFINIBAND_BYTES_PER_UNIT),
    ("port_xmit_data", "bottleneck_infiniband_port_transmitted_bytes_total",
     "Data transmitted on an InfiniBand port (port_xmit_data x 4).", _INFINIBAND_BYTES_PER_UNIT),
    ("port_rcv_packets", "bottleneck_infiniband_port_received_packets_total",
     "Packets received on an InfiniBand port (port_rcv_packets).", 1),
    ("port_xmit_packets", "bottleneck_infiniband_port_transmitted_packets_total",
     "Packets transmitted on an InfiniBand port (port_xmit_packets).", 1),
    ("port_rcv_errors", "bottleneck_infiniband_port_receive_errors_total",
     "Packets received with errors on an InfiniBand port (port_rcv_errors).", 1),
    ("port_xmit_discards", "bottleneck_infiniband_port_transmit_discards_total",
     "Outbound packets discarded because the port was down or congested (port_xmit_discards).", 1),
    ("port_xmit_wait", "bottleneck_infiniband_port_transmit_wait_total",
     "Ticks (device-specific length) in which the port had data to send but no flow-control credits "
     "(port_xmit_wait); its growth means fabric congestion.", 1),
    ("link_downed", "bottleneck_infiniband_port_link_downed_total",
     "Times the InfiniBand link went down (link_downed).", 1),
)
# ports/<port>/rate reads "200 Gb/sec (4X HDR)"; state reads "4: ACTIVE".
_INFINIBAND_ACTIVE = "ACTIVE"


@register(
    "network",
    help="Network traffic, errors and drops per interface, link speed and state, InfiniBand port traffic "
    "(/proc/net/dev, /sys/class/net, /sys/class/infiniband).",
    options=device_filter_options(DEFAULT_EXCLUDE, "interface", "match device-exclude"),
)
class NetworkCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs
        self.sysfs = ctx.sysfs
        self.filter = DeviceFilter.from_options(ctx.options, DEFAULT_EXCLUDE)

    def collect(self) -> Iterable[Metric]:
        interfaces = read_net_dev(self.procfs) or {}
        wanted = {name: columns for name, columns in interfaces.items() if self.filter.wanted(name)}
        if wanted:
            yield from self._counters(wanted)
            yield from self._links(list(wanted))
        yield from self._infiniband()

    def _counters(self, wanted: dict[str, list[int]]) -> Iterable[Metric]:
        for column, name, help_text in _COUNTERS:
            family = CounterMetricFamily(name, f"{help_text} (/proc/net/dev).", labels=["device"])
            for device, columns in wanted.items():
                family.add_metric([device], columns[column])
            yield family

    def _links(self, devices: list[str]) -> Iterable[Metric]:
        speed = GaugeMetricFamily(
            "bottleneck_network_speed_bytes",
            "Link speed in bytes per second (/sys/class/net/<device>/speed); "
            "absent when the driver does not know it.",
            labels=["device"],
        )
        up = GaugeMetricFamily(
            "bottleneck_network_up",
            "1 when the interface's operstate is up, else 0 (/sys/class/net/<device>/operstate).",
            labels=["device"],
        )
        for device in devices:
            base = os.path.join(self.sysfs, "class", "net", device)
            megabits = read_int(os.path.join(base, "speed"))
            if megabits is not None and megabits > 0 and megabits not in _SPEED_UNKNOWN:
                speed.add_metric([device], megabits * _BYTES_PER_MEGABIT)
            state = read_text(os.path.join(base, "operstate"))
            if state is not None:
                up.add_metric([device], 1.0 if state.strip() == "up" else 0.0)
        for family in (speed, up):
            if family.samples:
                yield family

    def _infiniband(self) -> Iterable[Metric]:
        labels = ["device", "port"]
        counters = [(filename, CounterMetricFamily(name, help_text, labels=labels),
                     multiplier) for filename, name, help_text, multiplier in _INFINIBAND_COUNTERS]
        speed = GaugeMetricFamily("bottleneck_infiniband_port_speed_bytes",
                                  "Link rate of an InfiniBand port in bytes per second (ports/<port>/rate).",
                                  labels=labels)
        up = GaugeMetricFamily("bottleneck_infiniband_port_up",
                               "1 when the InfiniBand port's state is ACTIVE, else 0 (ports/<port>/state).",
                               labels=labels)
        root = os.path.join(self.sysfs, "class", "infiniband")
        for hca in list_dir(root):
            for port in list_dir(os.path.join(root, hca, "ports")):
                port_dir = os.path.join(root, hca, "ports", port)
                for filename, family, multiplier in counters:
                    value = read_count(os.path.join(port_dir, "counters", filename))
                    if value is not None:
                        family.add_metric([hca, port], value * multiplier)
                rate = read_rate(os.path.join(port_dir, "rate"))
                if rate is not None:
                    speed.add_metric([hca, port], rate)
                state = read_text(os.path.join(port_dir, "state"))
                if state is not None:
                    up.add_metric([hca, port], 1.0 if _INFINIBAND_ACTIVE in state else 0.0)
        counter_families: list[Metric] = [family for _, family, _ in counters]
        for metric in (*counter_families, speed, up):
            if metric.samples:
                yield metric
