"""Which kernel target suits a SYCL device.

bmg and lnl are Intel Xe2 GPUs (Battlemage, Lunar Lake): SIMD16 sub-groups, block reads, DPAS. cpu is any CPU device
(Intel's OpenCL CPU runtime), which gets the CPU-shaped kernels. A device that is neither gets a TargetError rather
than a guess; XE2RT_TARGET or the per-call `target=` overrides the choice.
"""
from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

import dpctl

from . import config
from .errors import TargetError

# PCI device ids, from the Linux kernel's include/drm/intel/pciids.h.
BMG_G21_IDS = frozenset({0xE202, 0xE209, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE215, 0xE216})
BMG_G31_IDS = frozenset({0xE220, 0xE221, 0xE222, 0xE223})
LNL_IDS = frozenset({0x6420, 0x64A0, 0x64B0})

# Marketing names seen in Intel driver device strings, for drivers that do not append the PCI id.
_NAME_PATTERNS = [
    (re.compile(r"\bB(580|570|60|50)\b"), "bmg", "BMG-G21"),
    (re.compile(r"\bB(770|65)\b"), "bmg", "BMG-G31"),
    (re.compile(r"Battlemage", re.I), "bmg", "BMG"),
    (re.compile(r"Lunar ?Lake|\bArc\(TM\) 1[34]0V\b", re.I), "lnl", "LNL"),
]

# Hardware threads a launch should cover to fill the chip (seed 000: num_groups x local_size ~ HW threads).
HW_THREADS = {"BMG-G31": 2048, "BMG-G21": 1280, "BMG": 2048, "LNL": 512}
NOMINAL_HW_THREADS = {"bmg": 2048, "lnl": 512}

INTEL_VENDOR = 0x8086


@dataclass(frozen=True)
class DeviceTarget:
    target: str
    chip: str  # "BMG-G21", "BMG-G31", "LNL", "CPU"
    pci_id: int | None
    reason: str


def _pci_id_from_name(name: str) -> int | None:
    match = re.search(r"\[0x([0-9a-fA-F]{4})\]", name)
    return int(match.group(1), 16) if match else None


def _intel_gpu_pci_ids_from_sysfs() -> list[int]:
    ids = []
    for card in sorted(glob.glob("/sys/class/drm/card[0-9]*/device")):
        try:
            vendor = int(Path(card, "vendor").read_text(), 16)
            if vendor == INTEL_VENDOR:
                ids.append(int(Path(card, "device").read_text(), 16))
        except (OSError, ValueError):
            continue
    return sorted(set(ids))


def _chip_from_pci_id(pci_id: int) -> tuple[str, str] | None:
    if pci_id in BMG_G21_IDS:
        return "bmg", "BMG-G21"
    if pci_id in BMG_G31_IDS:
        return "bmg", "BMG-G31"
    if pci_id in LNL_IDS:
        return "lnl", "LNL"
    return None


def detect(device: dpctl.SyclDevice) -> DeviceTarget:
    """The target a device gets when nothing is forced."""
    if device.is_cpu:
        return DeviceTarget("cpu", "CPU", None, "CPU device")
    name = device.name
    if device.is_gpu and "intel" in device.vendor.lower():
        pci_id = _pci_id_from_name(name)
        if pci_id is None:
            sysfs_ids = _intel_gpu_pci_ids_from_sysfs()
            pci_id = sysfs_ids[0] if len(sysfs_ids) == 1 else None
        if pci_id is not None and _chip_from_pci_id(pci_id):
            target, chip = _chip_from_pci_id(pci_id)
            return DeviceTarget(target, chip, pci_id, f"PCI device id 0x{pci_id:04X}")
        for pattern, target, chip in _NAME_PATTERNS:
            if pattern.search(name):
                return DeviceTarget(target, chip, pci_id, f"device name {name!r}")
        id_text = f" (PCI id 0x{pci_id:04X})" if pci_id is not None else ""
        raise TargetError(
            f"{name!r}{id_text} is an Intel GPU but not an Xe2 chip (BMG-G21/G31, LNL) that xe2rt ships binaries for; "
            f"set XE2RT_TARGET=bmg|lnl|cpu or pass target= to force one"
        )
    raise TargetError(
        f"no xe2rt target for device {name!r} ({device.device_type.name}, vendor {device.vendor!r}); supported: Intel "
        f"Xe2 GPUs (bmg, lnl) and CPU devices (cpu); set XE2RT_TARGET or pass target= to force one"
    )


def resolve(device: dpctl.SyclDevice, target: str | None = None) -> str:
    """Per-call target, else XE2RT_TARGET, else detection."""
    if target is not None:
        return config.check_target_name(target, "target")
    forced = config.forced_target()
    return forced if forced is not None else detect(device).target


def target_for(device: dpctl.SyclDevice | str | None = None) -> str:
    """Public: the kernel target xe2rt uses for `device` (a SyclDevice, a filter string, or the default device)."""
    if device is None:
        device = dpctl.select_default_device()
    elif isinstance(device, str):
        device = dpctl.SyclDevice(device)
    return resolve(device)


def hw_threads(device: dpctl.SyclDevice, target: str) -> int:
    """Hardware threads to fill: the real count on an Xe2 GPU, the chip's nominal count when a GPU target runs
    elsewhere (tests on the CPU device), and the compute units of a CPU."""
    if target == "cpu":
        return max(1, device.max_compute_units)
    if device.is_gpu:
        # Level Zero reports EUs as compute units; Xe2 has 8 hardware threads per EU.
        return max(1, device.max_compute_units) * 8
    return NOMINAL_HW_THREADS[target]
