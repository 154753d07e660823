"""The scenarios of the training area's verdicts (``areas/training.py``): jobs whose ranks wait for data, for
storage, for each other, or stop.

Used at build time and by tests only: the daemon never imports it.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.scenarios.builders import gpu, host_batches, node, process, rank, setup
from bottleneck_exporter.heuristics.scenarios.series import (
    EXPORTER_JOB,
    INSTANCE,
    INSTANCE_2,
    TRAIN_JOB,
    Series,
    Timeline,
)
from bottleneck_exporter.heuristics.scenarios.table import (
    FIRES,
    NEAR_MISS,
    NOT_YET,
    PROC0,
    RANK0,
    Expect,
    Scenario,
    row,
)

NO_CAUSE = "none of its node's signals stands out: work only this rank does"


def ddp_job(tl: Timeline, slow_rank_data_wait: float) -> list[Series]:
    """Four DDP ranks on two nodes: the all-reduce evens out their step times (1 s each), so only the
    local work (data wait + forward + optimizer) of rank 3 shows that it is the slow one."""
    return [s for r in range(4)
            for s in rank(tl, rank_=str(r), instance=INSTANCE if r < 2 else INSTANCE_2, step=1.0,
                          data_wait=slow_rank_data_wait if r == 3 else 0.2, forward=0.2, optimizer=0.05)]


def gloo_job(tl: Timeline, rank0_between: float) -> list[Series]:
    """Three gloo ranks on one node, 0.8 s steps: each computes 0.5 s; rank 0 also spends ``rank0_between``
    seconds between steps (logging), which ranks 1 and 2 wait out inside backward's all-reduce."""
    return [s for r in range(3)
            for s in rank(tl, rank_=str(r), step=0.8, data_wait=0.05, forward=0.2, optimizer=0.05,
                          between=rank0_between if r == 0 else 0.0, device="cpu")]


def straggler(instance: str, rank_: str, phase: str, cause: str) -> dict[str, str]:
    """The labels of a StragglerRank alert: the rank, where its extra time goes, what its node shows."""
    return {"instance": instance, "job": EXPORTER_JOB, "training_job": TRAIN_JOB, "rank": rank_, "phase": phase,
            "cause": cause}


e = Expect  # one expected alert instance: e(labels, value)

SCENARIOS: tuple[Scenario, ...] = (
    # -- input-bound ---------------------------------------------------------------------------------------------------
    row("InputBound", FIRES, "num_workers_0_rank_waits_80pct_of_each_step",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t) + process(t, main=1.0, workers=0),
        e(RANK0, 0.8)),
    # Regression: every verdict carried the exporter's namespace (its scrape target's), so namespace-scoped
    # routing, silences and kube-prometheus-stack's InfoInhibitor acted on `monitoring`, not on the job.
    row("InputBound", FIRES, "rank_in_a_pod_alert_carries_the_workloads_namespace_and_pod",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, namespace="monitoring",
                       pod=("ml", "resnet50-worker-0")) + node(t) + process(t, main=1.0, workers=0),
        e({**RANK0, "namespace": "ml", "pod": "resnet50-worker-0"}, 0.8)),
    row("InputBound", FIRES, "rank_reporting_no_pod_keeps_its_targets_namespace_and_still_fires",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, namespace="monitoring") + node(t)
        + process(t, main=1.0, workers=0),
        e({**RANK0, "namespace": "monitoring"}, 0.8)),
    row("InputBound", NEAR_MISS, "data_wait_45pct_just_below_threshold",
        lambda t: rank(t, data_wait=0.225, forward=0.1) + node(t) + process(t)),
    row("InputBound", NEAR_MISS, "storage_saturated_is_io_bound_not_input_bound",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
        + process(t, worker=0.2)),
    row("InputBound", NOT_YET, "job_started_3m_ago_already_input_bound",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t) + process(t, main=1.0, workers=0),
        e(RANK0, 0.8)),
    row("InputBound", NEAR_MISS, "cpu_limit_throttles_the_trainer_while_cores_idle",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, busy=0.23)
        + process(t, cpu_limit=2.0, throttled=0.8)),
    row("TooFewLoaderWorkers", FIRES, "two_workers_wait_while_6_cores_idle",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2) + node(t, busy=0.25)
        + process(t, workers=2), e(RANK0, 8)),
    row("TooFewLoaderWorkers", FIRES, "cpu_limit_of_4_cores_caps_the_workers_at_3",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1) + node(t, busy=0.25)
        + process(t, workers=1, cpu_limit=4.0, throttled=0.1), e(RANK0, 3)),
    # Regression: a trainer under a CPU limit was credited with its limit on a node whose cores were all busy
    # (BottleneckCpuSaturated fired beside it, saying to stop the competing processes), and told to add two
    # workers that would only queue: a CFS quota is a ceiling, not cores kept for the container.
    row("TooFewLoaderWorkers", NEAR_MISS, "cpu_limit_of_4_cores_on_a_saturated_node_has_no_core_to_give",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1)
        + node(t, busy=0.95, iowait=0.0) + process(t, workers=1, cpu_limit=4.0)),
    # The same: the limit's 5 cores for workers were named while the node had 3 idle.
    row("TooFewLoaderWorkers", FIRES, "cpu_limit_of_6_cores_on_a_node_with_3_idle_names_what_is_free",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1)
        + node(t, busy=0.6, iowait=0.0) + process(t, workers=1, cpu_limit=6.0), e(RANK0, 4)),
    # Regression: a trainer the receiver did not register (pushing over UDP) has no job on its process; its
    # limit was lost, and the node's idle cores named 7.
    row("TooFewLoaderWorkers", FIRES, "unregistered_trainer_under_a_cpu_limit_of_4",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1) + node(t, busy=0.25)
        + process(t, training_job="", workers=1, cpu_limit=4.0, throttled=0.1), e(RANK0, 3)),
    # Regression: each of the ranks torchrun starts in one container was given the container's whole limit.
    row("TooFewLoaderWorkers", NEAR_MISS, "two_ranks_of_one_container_share_its_limit_of_6",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2)
        + rank(t, rank_="1", data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2) + node(t, busy=0.25)
        + process(t, workers=2, cpu_limit=6.0, limit_sharers=2)
        + process(t, local_rank="1", workers=2, cpu_limit=6.0, limit_sharers=2)),
    # Regression: a rank pinned to a few CPUs was given the node's idle cores beyond them.
    row("TooFewLoaderWorkers", FIRES, "pinned_to_4_of_8_cpus_caps_the_workers_at_3",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1) + node(t, busy=0.25)
        + process(t, workers=1, allowed_cpus=4), e(RANK0, 3)),
    row("TooFewLoaderWorkers", FIRES, "unpinned_rank_counts_the_nodes_idle_cores",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2) + node(t, busy=0.25)
        + process(t, workers=2, allowed_cpus=8), e(RANK0, 8)),
    # Regression: a process's CPUs were its rank's by LOCAL_RANK alone, and jobs started without torchrun all
    # have the same: the unpinned job's 8 CPUs were the pinned one's too.
    row("TooFewLoaderWorkers", NEAR_MISS, "pinned_job_beside_an_unpinned_one_with_the_same_local_rank",
        lambda t: rank(t, training_job="pinned", data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1)
        + rank(t, training_job="unpinned", num_workers=1) + node(t, busy=0.25)
        + process(t, training_job="pinned", workers=1, allowed_cpus=2, name="pinned.py")
        + process(t, training_job="unpinned", workers=1, allowed_cpus=8, name="unpinned.py")),
    row("TooFewLoaderWorkers", NEAR_MISS, "pinned_to_2_cpus_leaves_no_core_for_another_worker",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=1) + node(t, busy=0.25)
        + process(t, workers=1, allowed_cpus=2)),
    row("TooFewLoaderWorkers", NEAR_MISS, "workers_already_use_the_cores_left",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=6) + node(t, busy=0.9, iowait=0.0)
        + process(t, workers=6)),
    row("TooFewLoaderWorkers", NEAR_MISS, "two_ranks_with_5_workers_share_4_idle_cores",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=5)
        + rank(t, rank_="1", data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=5)
        + node(t, busy=0.5, iowait=0.0)),
    row("TooFewLoaderWorkers", NEAR_MISS, "cpu_limit_leaves_no_core_for_another_worker",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2) + node(t, busy=0.25)
        + process(t, workers=2, cpu_limit=3.0, throttled=0.1)),
    # Missed on a real run (bottleneck-exporter run on a CNN whose dataset decodes in the main process): a
    # third of each step waiting for data, a core idle, and no verdict, as the wait was below InputBound's.
    row("TooFewLoaderWorkers", FIRES, "main_thread_loads_a_third_of_each_step_while_6_cores_idle",
        lambda t: rank(t, data_wait=0.17, num_workers=0) + node(t, busy=0.25) + process(t, main=1.0, workers=0),
        e(RANK0, 6)),
    row("TooFewLoaderWorkers", NEAR_MISS, "main_thread_loads_15pct_of_each_step",
        lambda t: rank(t, data_wait=0.075, num_workers=0) + node(t, busy=0.25) + process(t, main=1.0, workers=0)),
    row("TooFewLoaderWorkers", NEAR_MISS, "rank_not_input_bound",
        lambda t: rank(t, num_workers=1) + node(t, busy=0.25) + process(t, workers=1)),
    row("TooFewLoaderWorkers", NOT_YET, "job_started_recently",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01, num_workers=2) + node(t, busy=0.25)
        + process(t, workers=2), e(RANK0, 8)),
    row("IoBound", FIRES, "dataset_on_saturated_disk_loaders_idle",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
        + process(t, worker=0.2), e(RANK0, 0.8)),
    row("IoBound", FIRES, "network_filesystem_stalls_show_as_io_pressure",
        lambda t: rank(t, data_wait=0.3, forward=0.1, optimizer=0.05) + node(t, io_pressure=0.6)
        + process(t, worker=0.1), e(RANK0, 0.6)),
    row("IoBound", NEAR_MISS, "disk_busy_but_loaders_cpu_bound",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
        + process(t, worker=0.95)),
    row("IoBound", NOT_YET, "job_started_on_a_saturated_disk",
        lambda t: rank(t, data_wait=0.4, forward=0.04, optimizer=0.01) + node(t, disk_busy=0.95)
        + process(t, worker=0.2), e(RANK0, 0.8)),
    # -- host-to-device copies (the hook samples one batch in 64: 0.2 checks a second at ~13 steps/s) ----------
    row("PageableCopies", FIRES, "pin_memory_false_loader_on_a_cuda_rank",
        lambda t: rank(t) + host_batches(t, pageable=1.0), e(RANK0, 1.0), severity="info"),
    row("PageableCopies", NEAR_MISS, "pinned_loader_on_a_cuda_rank",
        lambda t: rank(t) + host_batches(t, pageable=0.0), severity="info"),
    row("PageableCopies", NEAR_MISS, "custom_collate_pins_two_batches_in_three",
        lambda t: rank(t) + host_batches(t, pageable=1 / 3), severity="info"),
    row("PageableCopies", NEAR_MISS, "cpu_rank_copies_nothing", lambda t: rank(t, device="cpu"), severity="info"),
    row("PageableCopies", NOT_YET, "loader_rebuilt_without_pin_memory",
        lambda t: rank(t) + host_batches(t, pageable=1.0, before=0.0), e(RANK0), severity="info"),
    # -- GPU memory and launch -----------------------------------------------------------------------------------------
    row("LaunchBound", FIRES, "tiny_kernels_gpu_35pct_busy_no_data_wait",
        lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t, busy=0.4),
        e(RANK0, 0.35), severity="info"),
    row("LaunchBound", NEAR_MISS, "gpu_55pct_busy", lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.55) + node(t),
        severity="info"),
    row("LaunchBound", NEAR_MISS, "cpu_saturated_explains_the_idle_gpu",
        lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t, busy=0.95, iowait=0.0), severity="info"),
    row("LaunchBound", NEAR_MISS, "cpu_training_job_next_to_idle_gpus",
        lambda t: rank(t, data_wait=0.01, device="cpu") + gpu(t, util=0.0) + node(t), severity="info"),
    row("LaunchBound", NOT_YET, "job_started_recently",
        lambda t: rank(t, data_wait=0.01) + gpu(t, util=0.35) + node(t), e(RANK0, 0.35), severity="info"),
    # -- cross-node ----------------------------------------------------------------------------------------------------
    row("GpuImbalance", FIRES, "rank_on_second_node_gpu_30pct_busy_vs_90pct",
        lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.3),
        e({"training_job": TRAIN_JOB}, 0.6)),
    row("GpuImbalance", NEAR_MISS, "ranks_90pct_and_60pct_busy",
        lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.6)),
    row("GpuImbalance", NOT_YET, "imbalanced_job_started_recently",
        lambda t: rank(t, gpu_busy=0.9) + rank(t, rank_="1", instance=INSTANCE_2, gpu_busy=0.3),
        e({"training_job": TRAIN_JOB}, 0.6)),
    row("StragglerRank", FIRES, "ddp_rank_3_slow_loader_shows_in_own_work_not_step_time",
        lambda t: ddp_job(t, slow_rank_data_wait=0.4),
        e(straggler(INSTANCE_2, "3", "data_wait", NO_CAUSE), 0.65 / 0.45)),
    row("StragglerRank", FIRES, "independent_rank_1_steps_1_5x_slower",
        lambda t: [s for r in range(4) for s in rank(t, rank_=str(r), instance=INSTANCE if r != 1 else INSTANCE_2,
                                                    step=1.5 if r == 1 else 1.0, data_wait=0.1, forward=0.3,
                                                    optimizer=0.1)],
        e(straggler(INSTANCE_2, "1", "backward", NO_CAUSE), 1.5)),
    row("StragglerRank", FIRES, "gloo_rank_0_logs_between_steps_while_its_peers_wait_in_backward",
        lambda t: gloo_job(t, rank0_between=0.3), e(straggler(INSTANCE, "0", "between_phases", NO_CAUSE), 2.0)),
    row("StragglerRank", FIRES, "rank_reporting_collective_waits_least_its_gpu_throttled",
        lambda t: [s for r in range(3) for s in rank(
            t, rank_=str(r), instance=INSTANCE_2 if r == 2 else INSTANCE, step=1.0, data_wait=0.05,
            forward=0.45 if r == 2 else 0.25, optimizer=0.05, collective=0.05 if r == 2 else 0.25)]
        + gpu(t, instance=INSTANCE_2, thermal=1.0),
        e(straggler(INSTANCE_2, "2", "forward", "a GPU of its node is throttled (thermal, HW slowdown or power "
                    "brake)"), 0.95 / 0.75), needs=("bottleneck_gpu_clock_event_active",)),
    # Regression: with two causes on its node (its loaders at a full core, tasks queueing for the CPUs), the
    # node's slowdown cause held both, and the alert's join on it failed (duplicate series) in Prometheus and
    # in diagnose: on the nodes where a straggler has a cause, it got no verdict.
    row("StragglerRank", FIRES, "straggler_on_a_node_with_two_causes_is_given_the_first",
        lambda t: [s for r in range(4) for s in rank(t, rank_=str(r), instance=INSTANCE if r != 1 else INSTANCE_2,
                                                    step=1.5 if r == 1 else 1.0, data_wait=0.1, forward=0.3,
                                                    optimizer=0.1)]
        + node(t, instance=INSTANCE_2, cpu_pressure=0.8) + process(t, instance=INSTANCE_2, local_rank="1", worker=1.0),
        e(straggler(INSTANCE_2, "1", "backward", "its node's DataLoader workers use all the CPU they can get"), 1.5)),
    row("StragglerRank", NEAR_MISS, "rank_3_own_work_1_1x_median",
        lambda t: ddp_job(t, slow_rank_data_wait=0.25)),
    row("StragglerRank", NEAR_MISS, "gloo_rank_0_logs_0_05s_between_steps",
        lambda t: gloo_job(t, rank0_between=0.05)),
    row("StragglerRank", NOT_YET, "straggler_job_started_recently",
        lambda t: ddp_job(t, slow_rank_data_wait=0.4),
        e(straggler(INSTANCE_2, "3", "data_wait", NO_CAUSE), 0.65 / 0.45)),
    row("CommunicationBound", FIRES, "big_model_tiny_batch_allreduce_in_flight_70pct_of_the_step",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.7),
        e(RANK0, 0.7)),
    row("CommunicationBound", NEAR_MISS, "allreduce_hidden_behind_backward_45pct_of_the_step",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.2, optimizer=0.03, collective=0.45)),
    row("CommunicationBound", NOT_YET, "communication_bound_job_started_recently",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.7),
        e(RANK0, 0.7)),
    # -- what the training thread loses besides its phases ------------------------------------------------------------
    row("GcPauses", FIRES, "gc_collect_every_step_over_millions_of_objects_takes_60pct_of_each_step",
        lambda t: rank(t, step=0.5, forward=0.35, gc=0.3), e(RANK0, 0.6)),
    row("GcPauses", NEAR_MISS, "collections_take_8pct_of_the_step",
        lambda t: rank(t, step=0.5, gc=0.04)),
    row("GcPauses", NOT_YET, "gc_bound_job_started_recently",
        lambda t: rank(t, step=0.5, forward=0.35, gc=0.3), e(RANK0, 0.6)),
    row("BlockingCheckpoints", FIRES, "large_checkpoint_every_30_steps_written_on_the_training_thread",
        lambda t: rank(t, step=0.6, between=0.1, checkpoint=0.1, long_excess=0.1) + process(t),
        e(RANK0, 0.1 / 0.6)),
    row("BlockingCheckpoints", NEAR_MISS, "checkpoint_every_500_steps_costs_2pct",
        lambda t: rank(t, step=0.5, between=0.01, checkpoint=0.01, long_excess=0.01) + process(t)),
    row("BlockingCheckpoints", NOT_YET, "checkpointing_job_started_recently",
        lambda t: rank(t, step=0.6, between=0.1, checkpoint=0.1, long_excess=0.1) + process(t),
        e(RANK0, 0.1 / 0.6)),
    row("LongSteps", FIRES, "evaluation_every_50_steps_loses_a_quarter_of_the_time",
        lambda t: rank(t, step=0.5, between=0.125, long_excess=0.125, checkpoint=0.0, gc=0.002),
        e(RANK0, 0.25)),
    row("LongSteps", NEAR_MISS, "a_busy_machines_jitter_loses_3pct",
        lambda t: rank(t, step=0.5, long_excess=0.015)),
    row("LongSteps", NEAR_MISS, "long_steps_of_checkpoint_saves_are_named_blocking_checkpoints",
        lambda t: rank(t, step=0.6, between=0.1, checkpoint=0.1, long_excess=0.1)),
    row("LongSteps", NEAR_MISS, "long_steps_of_full_collections_are_named_gc_pauses",
        lambda t: rank(t, step=0.5, forward=0.35, gc=0.3, long_excess=0.1)),
    row("LongSteps", NEAR_MISS, "a_contended_nodes_preemptions_are_the_nodes_not_the_loops",
        lambda t: rank(t, step=0.5, long_excess=0.2) + node(t, cpu_pressure=0.8)),
    row("LongSteps", NEAR_MISS, "long_steps_of_recompilations_are_named_keeps_recompiling",
        lambda t: rank(t, step=0.5, long_excess=0.1, recompiles=2.0)),
    row("LongSteps", NOT_YET, "long_steps_job_started_recently",
        lambda t: rank(t, step=0.5, between=0.125, long_excess=0.125), e(RANK0, 0.25)),
    row("KeepsRecompiling", FIRES, "changing_sequence_lengths_recompile_twice_a_minute",
        lambda t: rank(t, recompiles=2.0, warmup_recompiles=6), e(RANK0, 2.0)),
    row("KeepsRecompiling", NEAR_MISS, "a_warm_up_of_12_recompilations_then_none",
        lambda t: rank(t, recompiles=0.0, warmup_recompiles=12)),
    row("KeepsRecompiling", NEAR_MISS, "one_recompilation_every_ten_minutes",
        lambda t: rank(t, recompiles=0.1)),
    row("KeepsRecompiling", NOT_YET, "recompiling_job_started_recently",
        lambda t: rank(t, recompiles=2.0), e(RANK0, 2.0)),
    row("SlowStart", FIRES, "dataset_indexing_and_compile_took_25m_to_the_first_step",
        lambda t: rank(t, startup=1500.0), e(RANK0, 1500.0), severity="info"),
    row("SlowStart", NEAR_MISS, "first_step_after_15m", lambda t: rank(t, startup=900.0), severity="info"),
    row("SlowStart", NOT_YET, "slow_starter_just_took_its_first_step",
        lambda t: rank(t, startup=1500.0), e(RANK0, 1500.0), severity="info"),
    row("CommunicationBound", FIRES, "gloo_allreduce_half_the_step_waited_for_after_backward",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.6, exposed=0.5,
                       device="cpu"), e(RANK0, 0.5)),
    row("CommunicationBound", NEAR_MISS, "allreduce_in_flight_60pct_but_hidden_behind_backward_exposed_15pct",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.6, exposed=0.15,
                       device="cpu")),
    row("CommunicationBound", NEAR_MISS, "peers_waiting_for_a_straggler_in_the_allreduce_are_not_bound",
        lambda t: [s for r in range(3) for s in rank(
            t, rank_=str(r), step=0.8, data_wait=0.05, forward=0.2, optimizer=0.05,
            between=0.3 if r == 0 else 0.0, collective=0.05 if r == 0 else 0.35,
            exposed=0.04 if r == 0 else 0.34, device="cpu")]),
    row("CommunicationBound", NOT_YET, "exposed_wait_job_started_recently",
        lambda t: rank(t, step=1.0, data_wait=0.02, forward=0.1, optimizer=0.03, collective=0.6, exposed=0.5,
                       device="cpu"), e(RANK0, 0.5)),
    # -- memory --------------------------------------------------------------------------------------------------------
    row("MemoryGrowing", FIRES, "losses_appended_with_their_graphs_grow_10_mib_a_second",
        lambda t: process(t, rss_growth=10 * 2**20) + node(t), e({**PROC0, "training_job": TRAIN_JOB}, 10 * 2**20)),
    row("MemoryGrowing", NEAR_MISS, "rss_grows_0_5_mib_a_second_under_5pct_of_the_node_an_hour",
        lambda t: process(t, rss_growth=0.5 * 2**20) + node(t)),
    row("MemoryGrowing", NEAR_MISS, "warm_up_growth_that_levels_off_is_no_leak",
        lambda t: process(t, rss_growth=20 * 2**20, growth_until=4) + node(t)),
    row("MemoryGrowing", NOT_YET, "leaking_job_started_recently",
        lambda t: process(t, rss_growth=10 * 2**20) + node(t), e({**PROC0, "training_job": TRAIN_JOB}, 10 * 2**20)),
    # 5 % of an 80 GiB device an hour is 1.14 MiB a second.
    row("GpuMemoryGrowing", FIRES, "predictions_kept_on_the_gpu_for_the_epoch_grow_2_mib_a_second",
        lambda t: rank(t, cuda_growth=2 * 2**20), e(RANK0, 2 * 2**20)),
    row("GpuMemoryGrowing", NEAR_MISS, "allocated_grows_0_5_mib_a_second_under_5pct_of_the_gpu_an_hour",
        lambda t: rank(t, cuda_growth=0.5 * 2**20)),
    # Optimizer state at the first step and the allocator's warm-up: 12 GiB in 5 minutes, then flat.
    row("GpuMemoryGrowing", NEAR_MISS, "warm_up_allocations_in_the_first_5_minutes_then_flat_are_no_leak",
        lambda t: rank(t, cuda_growth=40 * 2**20, cuda_growth_until=5)),
    row("GpuMemoryGrowing", NEAR_MISS, "a_cpu_rank_sends_no_cuda_memory", lambda t: rank(t, device="cpu")),
    row("GpuMemoryGrowing", NOT_YET, "gpu_leaking_job_started_recently",
        lambda t: rank(t, cuda_growth=2 * 2**20), e(RANK0, 2 * 2**20)),
    row("CudaAllocatorRetrying", FIRES, "allocator_frees_its_cache_and_retries_6_times_a_minute",
        lambda t: rank(t, cuda_retries=6), e(RANK0, 6)),
    row("CudaAllocatorRetrying", NEAR_MISS, "one_retry_every_two_minutes",
        lambda t: rank(t, cuda_retries=0.5)),
    row("CudaAllocatorRetrying", NOT_YET, "retrying_since_recently",
        lambda t: rank(t, cuda_retries=6), e(RANK0, 6)),
    # -- setup mistakes (the TensorBoard profiler plugin's setup advice) ----------------------------------------------
    row("DataParallelInUse", FIRES, "dataparallel_splits_each_batch_over_4_gpus",
        lambda t: rank(t) + setup(t, data_parallel=4), e(RANK0, 4)),
    row("DataParallelInUse", NEAR_MISS, "dataparallel_on_one_gpu_calls_the_model_as_it_is",
        lambda t: rank(t) + setup(t, data_parallel=1)),
    row("DataParallelInUse", NEAR_MISS, "dataparallel_on_the_cpu_has_no_device_ids",
        lambda t: rank(t, device="cpu") + setup(t, data_parallel=0, capability=None)),
    row("DataParallelInUse", NOT_YET, "dataparallel_job_started_recently",
        lambda t: rank(t) + setup(t, data_parallel=4), e(RANK0, 4)),
    row("SlowCollectiveBackend", FIRES, "ddp_on_cuda_allreduces_over_a_gloo_process_group",
        lambda t: rank(t, world_size=4, collective=0.2) + setup(t, backend="gloo"),
        e({**RANK0, "process_group_backend": "gloo"}, 0.4)),
    row("SlowCollectiveBackend", NEAR_MISS, "gloo_process_group_with_the_model_on_the_cpu",
        lambda t: rank(t, world_size=4, device="cpu", collective=0.2) + setup(t, backend="gloo", capability=None)),
    row("SlowCollectiveBackend", NEAR_MISS, "nccl_for_cuda_tensors_gloo_for_cpu_ones",
        lambda t: rank(t, world_size=4, collective=0.2) + setup(t, backend="cpu:gloo,cuda:nccl")),
    row("SlowCollectiveBackend", NEAR_MISS, "one_rank_job_has_no_collectives_to_slow",
        lambda t: rank(t, collective=0.2) + setup(t, backend="gloo")),
    row("SlowCollectiveBackend", NEAR_MISS, "gloo_group_carrying_none_of_the_trainings_collectives",
        lambda t: rank(t, world_size=4) + setup(t, backend="gloo")),
    row("SlowCollectiveBackend", NOT_YET, "gloo_on_cuda_job_started_recently",
        lambda t: rank(t, world_size=4, collective=0.2) + setup(t, backend="gloo"),
        e({**RANK0, "process_group_backend": "gloo"}, 0.4)),
    row("NoMixedPrecision", FIRES, "float32_training_on_an_a100_without_autocast",
        lambda t: rank(t) + setup(t, capability=8.0, autocast=0.0), e(RANK0, 8.0), severity="info"),
    row("NoMixedPrecision", FIRES, "h100_without_autocast_its_tensor_cores_idle",
        lambda t: rank(t) + setup(t, capability=9.0) + gpu(t, tensor=0.01), e(RANK0, 9.0), severity="info",
        needs=("bottleneck_gpu_tensor_activity_ratio",)),
    row("NoMixedPrecision", NEAR_MISS, "bfloat16_autocast_on_an_a100",
        lambda t: rank(t) + setup(t, capability=8.0, autocast=1.0), severity="info"),
    row("NoMixedPrecision", NEAR_MISS, "float32_on_a_pascal_gpu_without_tensor_cores",
        lambda t: rank(t) + setup(t, capability=6.0), severity="info"),
    row("NoMixedPrecision", NEAR_MISS, "model_kept_in_bfloat16_needs_no_autocast",
        lambda t: rank(t) + setup(t, capability=8.0, dtype="bfloat16"), severity="info"),
    row("NoMixedPrecision", FIRES, "h100_float32_matmuls_exact_its_tensor_cores_idle",
        lambda t: rank(t) + setup(t, capability=9.0, matmul_precision="highest") + gpu(t, tensor=0.01),
        e({**RANK0, "float32_matmul_precision": "highest"}, 9.0), severity="info",
        needs=("bottleneck_gpu_tensor_activity_ratio",)),
    # Exact float32 matmuls: the busy Tensor Cores are lower precision the hook cannot see (an autocast
    # inside a compiled model). Regression: in the dcgm-exporter bundles the Tensor-Core activity was 0 (they
    # did not read dcgm-exporter's DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), and the verdict fired here.
    row("NoMixedPrecision", NEAR_MISS, "h100_tensor_cores_busy_while_its_float32_matmuls_are_exact",
        lambda t: rank(t) + setup(t, capability=9.0, matmul_precision="highest") + gpu(t, tensor=0.4),
        severity="info", needs=("bottleneck_gpu_tensor_activity_ratio",)),
    # Regression: busy Tensor Cores silenced the verdict where they were TF32's, whose float32 activations
    # autocast to bfloat16 would still halve.
    row("NoMixedPrecision", FIRES, "h100_tensor_cores_busy_with_tf32_matmuls_still_float32_activations",
        lambda t: rank(t) + setup(t, capability=9.0, matmul_precision="high") + gpu(t, tensor=0.4),
        e({**RANK0, "float32_matmul_precision": "high"}, 9.0), severity="info",
        needs=("bottleneck_gpu_tensor_activity_ratio",)),
    # Regression: the verdict did not say that TF32 was on, and advised turning it on.
    row("NoMixedPrecision", FIRES, "a100_with_tf32_on_is_told_so",
        lambda t: rank(t) + setup(t, capability=8.0, matmul_precision="high"),
        e({**RANK0, "float32_matmul_precision": "high"}, 8.0), severity="info"),
    row("NoMixedPrecision", NEAR_MISS, "cpu_rank_has_no_tensor_cores",
        lambda t: rank(t, device="cpu") + setup(t, capability=None), severity="info"),
    row("NoMixedPrecision", NOT_YET, "float32_job_started_recently",
        lambda t: rank(t) + setup(t, capability=8.0), e(RANK0, 8.0), severity="info"),
    row("LoaderWorkersRestarted", FIRES, "loader_rebuilt_every_minute_forks_60_worker_sets_an_hour",
        lambda t: rank(t) + setup(t, worker_starts=60), e(RANK0, 60), severity="info"),
    row("LoaderWorkersRestarted", NEAR_MISS, "persistent_workers_start_once",
        lambda t: rank(t) + setup(t, worker_starts=0), severity="info"),
    row("LoaderWorkersRestarted", NEAR_MISS, "an_epoch_every_5_minutes_forks_12_sets_an_hour",
        lambda t: rank(t) + setup(t, worker_starts=12), severity="info"),
    row("LoaderWorkersRestarted", NOT_YET, "restarting_job_started_recently",
        lambda t: rank(t) + setup(t, worker_starts=60), e(RANK0, 60), severity="info"),
    # -- stalls --------------------------------------------------------------------------------------------------------
    row("TrainingStalled", FIRES, "hung_in_allreduce_9m_without_a_step",
        lambda t: rank(t, stall=(3, 10**6)) + process(t), e(RANK0, 9 * 60), eval_at=11),
    row("TrainingStalled", NEAR_MISS, "4m_checkpoint_save_is_not_a_stall",
        lambda t: rank(t, stall=(3, 7)) + process(t), eval_at=12),
    row("TrainingStalled", NEAR_MISS, "30s_steps_silent_8m_is_below_20_mean_steps",
        lambda t: rank(t, step=30.0, stall=(3, 10**6)) + process(t), eval_at=11),
    row("TrainingStalled", NEAR_MISS, "process_exited_is_not_a_stall",
        lambda t: rank(t, stall=(3, 10**6)) + process(t, alive_until=3), eval_at=11),
    row("TrainingStalled", NOT_YET, "stalled_just_past_the_threshold",
        lambda t: rank(t, stall=(t.start + 2, 10**6)) + process(t), e(RANK0)),
    row("TrainingStalled", FIRES, "hung_34m_without_a_step", lambda t: rank(t, stall=(3, 10**6)) + process(t),
        e(RANK0, 34 * 60), severity="critical", eval_at=36),
    row("TrainingStalled", NEAR_MISS, "stalled_20m_is_only_a_warning",
        lambda t: rank(t, stall=(3, 10**6)) + process(t), severity="critical", eval_at=23),
    row("TrainingStalled", NEAR_MISS, "process_exited_is_not_a_critical_stall",
        lambda t: rank(t, stall=(3, 10**6)) + process(t, alive_until=3), severity="critical", eval_at=43),
    row("TrainingStalled", NOT_YET, "stalled_just_past_the_critical_threshold",
        lambda t: rank(t, stall=(t.start + 2, 10**6)) + process(t), e(RANK0), severity="critical"),
)
