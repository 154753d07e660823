"""The scenarios of the GPU area's verdicts (``areas/gpu.py``): bursts of idle, memory too empty or too full, hot or
throttled GPUs, degraded links, lost GPUs, ECC and XID errors.

Used at build time and by tests only: the daemon never imports it.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.scenarios.builders import ecc_uncorrected, gpu, node, rank, xid
from bottleneck_exporter.heuristics.scenarios.series import series
from bottleneck_exporter.heuristics.scenarios.table import FIRES, GPU0, NEAR_MISS, NOT_YET, Expect, Scenario, row

e = Expect  # one expected alert instance: e(labels, value)

SCENARIOS: tuple[Scenario, ...] = (
    # -- input-bound ---------------------------------------------------------------------------------------------------
    row("GpuSawtooth", FIRES, "gpu_idle_40pct_busy_50pct_of_samples",
        lambda t: gpu(t, util=0.55, idle_samples=0.4, busy_samples=0.5), e(GPU0, 0.4), severity="info"),
    row("GpuSawtooth", NEAR_MISS, "flat_low_line_is_not_a_sawtooth",
        lambda t: gpu(t, util=0.3, idle_samples=0.05, busy_samples=0.0), severity="info"),
    row("GpuSawtooth", NOT_YET, "sawtooth_began_after_a_flat_busy_phase",
        lambda t: gpu(t, idle_samples=0.4, busy_samples=0.5, before={"idle_samples": 0.0, "busy_samples": 1.0}),
        e(GPU0), severity="info"),
    # -- GPU memory and launch -----------------------------------------------------------------------------------------
    row("GpuMemoryUnderused", FIRES, "batch_too_small_20pct_memory_40pct_util",
        lambda t: gpu(t, mem=0.2, util=0.4) + rank(t) + node(t), e(GPU0, 0.2), severity="info"),
    row("GpuMemoryUnderused", NEAR_MISS, "spare_gpu_not_used_by_the_job",
        lambda t: gpu(t, mem=0.01, util=0.0) + rank(t) + node(t), severity="info"),
    row("GpuMemoryUnderused", NEAR_MISS, "small_batch_but_gpu_85pct_busy",
        lambda t: gpu(t, mem=0.2, util=0.85) + rank(t) + node(t), severity="info"),
    row("GpuMemoryUnderused", NOT_YET, "training_started_recently",
        lambda t: gpu(t, mem=0.2, util=0.4, before={"mem": 0.0, "util": 0.0}) + rank(t) + node(t),
        e(GPU0, 0.2), severity="info"),
    row("GpuMemoryNearlyFull", FIRES, "97pct_of_gpu_memory_used", lambda t: gpu(t, mem=0.97), e(GPU0, 0.97)),
    row("GpuMemoryNearlyFull", NEAR_MISS, "94pct_of_gpu_memory_used", lambda t: gpu(t, mem=0.94)),
    row("GpuMemoryNearlyFull", NOT_YET, "batch_size_raised_recently",
        lambda t: gpu(t, mem=0.97, before={"mem": 0.6}), e(GPU0, 0.97)),
    # -- GPU health ----------------------------------------------------------------------------------------------------
    row("GpuThrottled", FIRES, "hw_thermal_slowdown_active_all_the_time", lambda t: gpu(t, thermal=1.0),
        e(GPU0, 1.0)),
    row("GpuThrottled", NEAR_MISS, "thermal_slowdown_flickers_one_scrape_in_six_power_cap_benign",
        lambda t: gpu(t, thermal=1 / 6)),
    row("GpuThrottled", NOT_YET, "fan_failed_recently", lambda t: gpu(t, thermal=1.0, before={"thermal": 0.0}),
        e(GPU0)),
    row("GpuTooHot", FIRES, "88c_with_slowdown_at_90c", lambda t: gpu(t, temp=88), e(GPU0, 88)),
    row("GpuTooHot", NEAR_MISS, "84c_with_slowdown_at_90c", lambda t: gpu(t, temp=84)),
    row("GpuTooHot", NOT_YET, "temperature_rose_recently", lambda t: gpu(t, temp=89, before={"temp": 70}),
        e(GPU0, 89)),
    row("PcieDegraded", FIRES, "x16_card_running_x8_under_load", lambda t: gpu(t, width=8, util=0.9),
        e(GPU0, 0.5)),
    row("PcieDegraded", NEAR_MISS, "idle_gpu_link_drops_to_gen1_by_design", lambda t: gpu(t, gen=1, util=0.0)),
    row("PcieDegraded", NOT_YET, "link_retrained_to_x4_recently",
        lambda t: gpu(t, width=4, util=0.9, before={"width": 16}), e(GPU0, 0.25)),
    # -- hardware faults -----------------------------------------------------------------------------------------------
    row("GpuLost", FIRES, "gpu_fell_off_the_bus", lambda t: gpu(t, up=0) + gpu(t, index="1"), e(GPU0, 0),
        severity="critical"),
    row("GpuLost", NEAR_MISS, "one_failed_nvml_answer_then_back",
        lambda t: [*gpu(t, up=1), series("bottleneck_gpu_up", {**GPU0, "gpu": "1", "uuid": "GPU-5e1f7c3a-0001"},
                                         [0.0 if m == 4 else 1.0 for m in range(t.length + 1)])],
        severity="critical"),
    row("GpuLost", NOT_YET, "gpu_lost_this_minute", lambda t: gpu(t, up=0, before={"up": 1}), e(GPU0, 0),
        severity="critical"),
    row("GpuUncorrectableErrors", FIRES, "two_uncorrectable_ecc_errors",
        lambda t: gpu(t) + ecc_uncorrected(t, errors_at=[6]), e({**GPU0, "type": "uncorrected"}, 2),
        severity="critical"),
    row("GpuUncorrectableErrors", NEAR_MISS, "corrected_errors_only", lambda t: gpu(t) + ecc_uncorrected(t, []),
        severity="critical"),
    row("GpuUncorrectableErrors", NOT_YET, "errors_just_counted",
        lambda t: gpu(t) + ecc_uncorrected(t, errors_at=[t.start]), e({**GPU0, "type": "uncorrected"}),
        severity="critical"),
    row("GpuXidFatal", FIRES, "xid_79_gpu_fell_off_the_bus", lambda t: gpu(t) + xid(t, "79", [5]),
        e({**GPU0, "xid": "79"}), severity="critical"),
    row("GpuXidFatal", FIRES, "xid_48_double_bit_ecc_error", lambda t: gpu(t) + xid(t, "48", [4, 6]),
        e({**GPU0, "xid": "48"}), severity="critical"),
    row("GpuXidFatal", NEAR_MISS, "xid_31_page_fault_is_the_jobs_not_the_gpus",
        lambda t: gpu(t) + xid(t, "31", [5]), severity="critical"),
    row("GpuXidFatal", NOT_YET, "xid_95_uncontained_ecc_just_reported",
        lambda t: gpu(t) + xid(t, "95", [t.start]), e({**GPU0, "xid": "95"}), severity="critical"),
    row("GpuXidApplication", FIRES, "xid_31_illegal_memory_access_in_a_job", lambda t: gpu(t) + xid(t, "31", [5]),
        e({**GPU0, "xid": "31"})),
    row("GpuXidApplication", NEAR_MISS, "xid_79_is_a_fault_of_the_gpu_not_the_job",
        lambda t: gpu(t) + xid(t, "79", [5])),
    row("GpuXidApplication", NOT_YET, "xid_13_engine_exception_just_reported",
        lambda t: gpu(t) + xid(t, "13", [t.start]), e({**GPU0, "xid": "13"})),
)
