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
    # B580 without dpctl details: 160 EUs (compute units) x 4 threads in the 256-GRF mode, 8 with 128 GRF
    assert targets.hw_threads(FakeDevice("x", compute_units=160), "bmg") == 640
    assert targets.hw_threads(FakeDevice("x", compute_units=160), "bmg", grf_count=128) == 1280
    assert targets.hw_threads(queue.sycl_device, "lnl") == 8 * 8 * 4  # nominal LNL (8 Xe cores) when run elsewhere
    assert targets.hw_threads(queue.sycl_device, "bmg") == 20 * 8 * 4  # nominal BMG-G21


def test_geometry_from_dpctl_device_info(monkeypatch):
    """Where dpctl.utils.intel_device_info answers (Level Zero), its PCI id, EU count, threads per EU and bandwidth
    win over name parsing and the stated tables."""
    info = {"device_id": 0xE221, "gpu_eu_count": 256, "gpu_hw_threads_per_eu": 8, "max_mem_bandwidth": 608e9}
    monkeypatch.setattr(targets, "device_info", lambda device: info)
    monkeypatch.setattr(targets, "_intel_gpu_pci_ids_from_sysfs", lambda: [])
    device = FakeDevice("Intel(R) Arc(TM) B580 Graphics", compute_units=999)  # name says G21, dpctl says G31
    found = targets.detect(device)
    assert (found.target, found.chip, found.pci_id) == ("bmg", "BMG-G31", 0xE221) and "dpctl" in found.reason
    assert targets.hw_threads(device, "bmg") == 256 * 4
    chip, source = targets.chip_figures(device, "bmg")
    assert (chip.xe_cores, chip.mem_gbps) == (32, 608.0) and "intel_device_info" in source
    info.clear()  # no details: the name decides, the stated table gives the figures
    found = targets.detect(device)
    assert found.chip == "BMG-G21"
    chip, source = targets.chip_figures(device, "bmg")
    assert (chip.xe_cores, chip.mem_gbps) == (20, 456.0) and "stated" in source
