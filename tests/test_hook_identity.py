"""Job name and ranks as the hook derives them from launcher environments (no torch needed)."""

from __future__ import annotations

import pytest

from bottleneck_exporter.hook.identity import identify, job_name
from bottleneck_exporter.wire.schema import JOB_PATTERN


@pytest.mark.parametrize(("env", "expected"), [
    ({"BOTTLENECK_JOB": "resnet50", "SLURM_JOB_ID": "77"}, "resnet50"),
    ({"TORCHELASTIC_RUN_ID": "abc123", "SLURM_JOB_ID": "77"}, "abc123"),
    ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "bert"}, "bert-77"),
    ({"SLURM_JOB_ID": "77"}, "77"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "llama-ft-worker-3"}, "llama-ft"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "train-job-x7k2p"}, "train-job"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "trainer-5d8f9c7b4-x7k2p"}, "trainer"),
    ({"HOSTNAME": "llama-ft-worker-3"}, "train"),  # not in Kubernetes: the hostname means nothing
    ({"BOTTLENECK_JOB": 'my job "v2"\n'}, "my_job__v2__"),
])
def test_job_name_from_the_launcher_environment(env, expected):
    assert job_name(env=env, argv0="/home/me/train.py") == expected


def test_given_job_wins_and_every_derived_name_passes_the_receivers_check():
    assert job_name("explicit", env={"BOTTLENECK_JOB": "env"}) == "explicit"
    for weird in ("", "ä" * 300, "a/b:c@d", " "):
        name = job_name(env={"BOTTLENECK_JOB": weird}, argv0=weird or "x")
        assert JOB_PATTERN.fullmatch(name), name


def test_ranks_from_torchrun_then_slurm_and_garbage_is_ignored():
    torchrun = identify(env={"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "SLURM_PROCID": "0"})
    assert (torchrun.rank, torchrun.local_rank, torchrun.world_size) == (5, 1, 8)
    slurm = identify(env={"SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "4"})
    assert (slurm.rank, slurm.local_rank, slurm.world_size) == (3, 3, 4)
    garbage = identify(env={"RANK": "-1", "WORLD_SIZE": "0", "LOCAL_RANK": "x"})
    assert (garbage.rank, garbage.local_rank, garbage.world_size) == (0, 0, 1)
