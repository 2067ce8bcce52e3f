"""Device -> target selection."""
import pytest

import xe2rt
from xe2rt import targets


class FakeDevice:
    def __init__(self, name, gpu=True, vendor="Intel(R) Corporation", compute_units=160):
        self.name = name
        self.is_gpu = gpu
        self.is_cpu = not gpu
        self.vendor = vendor
        self.max_compute_units = compute_units

        class T:
            pass
        self.device_type = T()
        self.device_type.name = "gpu" if gpu else "cpu"


@pytest.mark.parametrize("name,target,chip", [
    ("Intel(R) Graphics [0xe20b]", "bmg", "BMG-G21"),
    ("Intel(R) Graphics [0xe221]", "bmg", "BMG-G31"),
    ("Intel(R) Graphics [0x64a0]", "lnl", "LNL"),
    ("Intel(R) Arc(TM) B580 Graphics", "bmg", "BMG-G21"),
    ("Intel(R) Arc(TM) 140V GPU (16GB)", "lnl", "LNL"),
])
def test_intel_xe2_gpus(name, target, chip, monkeypatch):
    monkeypatch.setattr(targets, "_intel_gpu_pci_ids_from_sysfs", lambda: [])
    found = targets.detect(FakeDevice(name))
    assert (found.target, found.chip) == (target, chip)


def test_cpu_device_gets_cpu(queue):
    assert xe2rt.target_for(queue.sycl_device) == "cpu"
    assert xe2rt.target_for("opencl:cpu") == "cpu"


def test_non_xe2_intel_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(targets, "_intel_gpu_pci_ids_from_sysfs", lambda: [])
    with pytest.raises(xe2rt.TargetError, match=r"Arc\(TM\) A770.*0x56A0.*not an Xe2 chip.*XE2RT_TARGET"):
        targets.detect(FakeDevice("Intel(R) Arc(TM) A770 Graphics [0x56a0]"))


def test_foreign_gpu_is_refused():
    with pytest.raises(xe2rt.TargetError, match="no xe2rt target for device 'Some GPU'"):
        targets.detect(FakeDevice("Some GPU", vendor="Other Inc."))


def test_override_order(queue, monkeypatch):
    monkeypatch.setenv("XE2RT_TARGET", "lnl")
    assert targets.resolve(queue.sycl_device) == "lnl"
    assert targets.resolve(queue.sycl_device, "bmg") == "bmg"  # per call beats the environment
    monkeypatch.setenv("XE2RT_TARGET", "gen12")
    with pytest.raises(xe2rt.ConfigError, match="XE2RT_TARGET='gen12' is not a known target"):
        targets.resolve(queue.sycl_device)


def test_hw_threads_fill_rules(queue):
    assert targets.hw_threads(FakeDevice("x", compute_units=160), "bmg") == 1280  # B580: 160 EUs x 8 threads
    assert targets.hw_threads(queue.sycl_device, "lnl") == 512  # nominal LNL when run elsewhere
