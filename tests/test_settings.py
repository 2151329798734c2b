"""Phase settings: what each profile gives the phases, and a wrong value stopped when it is built."""

import pytest

from clustereval.errors import UsageError
from clustereval.phases.settings import (
    PROFILES,
    GpuSettings,
    HealthSettings,
    NetworkSettings,
    PairwiseSettings,
    StorageSettings,
    settings_for,
)
from clustereval.runner import PHASES, load_phase


def test_the_standard_profile_gives_the_published_recipe():
    storage = settings_for("storage", PROFILES["standard"])
    assert storage == StorageSettings()
    assert storage.fio_runtime_s == 180 and storage.file_sizes == (16 * 2**10, 2**20, 2**30)
    assert settings_for("allreduce", PROFILES["standard"]).max_bytes == 16 * 2**30
    assert settings_for("matmul", PROFILES["standard"]) == GpuSettings()


def test_quick_and_smoke_shorten_what_their_report_says():
    quick = PROFILES["quick"]
    assert settings_for("storage", quick).fio_runtime_s == 10
    assert settings_for("connectivity", quick).max_bytes == 2**30
    assert (settings_for("lemon", quick).soak_min_s, settings_for("lemon", quick).sustain_s) == (10.0, 5.0)
    smoke = settings_for("storage", PROFILES["smoke"])
    assert smoke.file_sizes == (16 * 2**10, 256 * 2**10, 4 * 2**20) and smoke.concurrent_bytes == 4 * 2**20
    assert settings_for("matmul", PROFILES["smoke"]).grid == "anchors"


def test_every_phase_is_built_with_its_settings():
    for name in PHASES:
        phase = load_phase(name, PROFILES["smoke"])
        settings = settings_for(name, PROFILES["smoke"])
        assert getattr(phase, "settings", None) == settings


@pytest.mark.parametrize("build", [
    lambda: GpuSettings(device="gpu"),
    lambda: GpuSettings(start_timeout_s=0),
    lambda: GpuSettings(soak_min_s=30, soak_max_s=10),
    lambda: HealthSettings(level=5),
    lambda: StorageSettings(file_sizes=()),
    lambda: StorageSettings(fio_ramp_s=-1),
    lambda: NetworkSettings(min_bytes=2**20, max_bytes=2**10),
    lambda: PairwiseSettings(payload_bytes=-1),
])
def test_a_wrong_value_is_refused_with_an_example(build):
    with pytest.raises(UsageError) as err:
        build()
    assert "e.g." in err.value.hint
