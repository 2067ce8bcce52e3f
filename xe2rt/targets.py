"""Which kernel target suits a SYCL device.

bmg and lnl are Intel Xe2 GPUs (Battlemage, Lunar Lake): SIMD16 sub-groups, block reads, DPAS. cpu is any CPU device
(Intel's OpenCL CPU runtime), which gets the CPU-shaped kernels. A device that is neither gets a TargetError rather
than a guess; XE2RT_TARGET or the per-call `target=` overrides the choice.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

import dpctl
import dpctl.utils

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



@dataclass(frozen=True)
class Chip:
    """Stated figures of an Xe2 chip (the static estimates in xe2rt.bench.xe2_static use them)."""
    name: str
    xe_cores: int
    clock_ghz: float
    mem_gbps: float
    note: str = ""
    xve_per_core: int = 8
    xmx_fp16_flop_per_clk_per_core: int = 2048

    @property
    def xves(self) -> int:
        return self.xe_cores * self.xve_per_core


CHIPS = {
    "BMG-G21": Chip("BMG-G21", 20, 2.67, 456.0),
    "BMG-G31": Chip("BMG-G31", 32, 2.67, 608.0, "clock not stated: BMG-G21's 2.67 GHz assumed"),
    "LNL": Chip("LNL", 8, 2.05, 136.5, "clock not stated: the Arc 140V's 2.05 GHz maximum assumed"),
}
# Which chip a target's nominal geometry describes when its binaries run elsewhere (ocloc's -device bmg is BMG-G21).
NOMINAL_CHIP = {"bmg": "BMG-G21", "lnl": "LNL"}
# Hardware threads per XVE by register-file mode: 8 with 128 GRF, 4 with the large register file (256 GRF) that the
# Xe2 kernels are compiled with (-ze-opt-large-register-file).
THREADS_PER_XVE = {128: 8, 256: 4}

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


def device_info(device) -> dict:
    """dpctl's Intel device details (PCI id everywhere; EU count, threads per EU, memory bandwidth on Level Zero);
    empty when the device or the backend gives none."""
    try:
        return dict(dpctl.utils.intel_device_info(device))
    except Exception:  # a stand-in device object, or a dpctl without the call
        return {}


def detect(device: dpctl.SyclDevice) -> DeviceTarget:
    """The target a device gets when nothing is forced: by the PCI id dpctl reports, else the one in the driver's
    device name, else sysfs, else the marketing name."""
    if device.is_cpu:
        return DeviceTarget("cpu", "CPU", None, "CPU device")
    name = device.name
    if device.is_gpu and "intel" in device.vendor.lower():
        reported = device_info(device).get("device_id")
        if reported is not None and _chip_from_pci_id(int(reported)):
            target, chip = _chip_from_pci_id(int(reported))
            return DeviceTarget(target, chip, int(reported), f"PCI device id 0x{int(reported):04X} (dpctl)")
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


_host_flags: frozenset | None = None


def host_cpu_flags() -> frozenset:
    """The host CPU's feature flags as Linux reports them (/proc/cpuinfo), empty where that file is not readable."""
    global _host_flags
    if _host_flags is None:
        flags: set = set()
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags.update(line.partition(":")[2].split())
                        break
        except OSError:
            pass
        _host_flags = frozenset(flags)
    return _host_flags


# The constants that mark a cpu binary calling x86 instructions by their LLVM intrinsic names (spirv_src/w4_cpu.h),
# with the /proc/cpuinfo flag its host needs: the CPU runtime compiles such a binary only for a host that has them.
HOST_ISA_CONSTANTS = {"CPU_AVX512_VNNI": "avx512_vnni", "CPU_AVX2": "avx2"}
HOST_ISA_NAMES = {"avx512_vnni": "AVX512-VNNI", "avx2": "AVX2"}


def cpu_has_flag(device: dpctl.SyclDevice, flag: str) -> bool:
    """Whether cpu binaries that execute the instructions of host CPU flag `flag` (HOST_ISA_CONSTANTS) can run on
    `device`: a CPU device on a host whose CPU reports the flag, and the CPU runtime compiling for that host
    (CL_CONFIG_CPU_TARGET_ARCH unset). Elsewhere the runtime could not compile them."""
    return device.is_cpu and flag in host_cpu_flags() and not os.environ.get("CL_CONFIG_CPU_TARGET_ARCH")


def cpu_has_avx512_vnni(device: dpctl.SyclDevice) -> bool:
    """Whether binaries that use AVX512-VNNI instructions (constant CPU_AVX512_VNNI, e.g. gemv_w4a16_vnni) run here."""
    return cpu_has_flag(device, "avx512_vnni")


def cpu_has_avx2(device: dpctl.SyclDevice) -> bool:
    """Whether binaries that use AVX2 instructions by name (constant CPU_AVX2, gemv_w4a16_avx2) run here."""
    return cpu_has_flag(device, "avx2")


def cpu_256bit(device: dpctl.SyclDevice, target: str) -> bool:
    """Whether a call for `target` runs cpu binaries on a host whose widest vectors are 256-bit (no avx512f, or the
    CPU runtime told to compile for another CPU): where the *_cpu256 variants (shaped for 16 ymm registers) replace
    the cpu kernels shaped for AVX-512 (gemm_w4a16_cpu256, decode_attention_cpu256, fma_peak_cpu256)."""
    return target == "cpu" and not cpu_has_flag(device, "avx512f")


def missing_host_isa(device: dpctl.SyclDevice, constants: dict) -> str | None:
    """The host CPU flag a binary with these build constants needs and `device` lacks (None: it can run)."""
    for constant, flag in HOST_ISA_CONSTANTS.items():
        if constants.get(constant) and not cpu_has_flag(device, flag):
            return flag
    return None


def describe_devices() -> str:
    """The SYCL devices this process sees, as 'filter (name)' pairs, for error messages."""
    devices = dpctl.get_devices()
    return ", ".join(f"{d.filter_string} ({d.name})" for d in devices) or "none"


def select_device(device: dpctl.SyclDevice | str | None = None) -> dpctl.SyclDevice:
    """A SyclDevice from a device, a SYCL filter string (e.g. 'opencl:cpu') or None (dpctl's default device); a filter
    that matches nothing, or no device at all, is an error that lists what there is."""
    if isinstance(device, dpctl.SyclDevice):
        return device
    if device is not None and not isinstance(device, str):
        from .errors import InputTypeError
        raise InputTypeError(f"device must be a dpctl.SyclDevice, a SYCL filter string or None, not "
                             f"{type(device).__name__}")
    try:
        return dpctl.SyclDevice(device) if device else dpctl.select_default_device()
    except (dpctl.SyclDeviceCreationError, ValueError, TypeError) as exc:
        from .errors import InputError
        wanted = f"device filter {device!r} matches no SYCL device" if device else "no default SYCL device"
        raise InputError(f"{wanted} ({exc}); devices here: {describe_devices()}") from exc


def target_for(device: dpctl.SyclDevice | str | None = None) -> str:
    """Public: the kernel target xe2rt uses for `device` (a SyclDevice, a filter string, or the default device)."""
    return resolve(select_device(device))


def hw_threads(device: dpctl.SyclDevice, target: str, grf_count: int = 256) -> int:
    """Hardware threads a launch must fill (seed 000: num_groups x local_size ~ HW threads) for kernels compiled with
    `grf_count` registers: on an Xe2 GPU, its XVEs (dpctl's gpu_eu_count, else the compute units) times the threads
    per XVE in that register-file mode (dpctl's gpu_hw_threads_per_eu is the 128-GRF count; 256 GRF halves it); the
    nominal chip's figures when a GPU target runs elsewhere (tests on the CPU device); a CPU's compute units."""
    if target == "cpu":
        return max(1, device.max_compute_units)
    if device.is_gpu:
        info = device_info(device)
        eus = int(info.get("gpu_eu_count") or device.max_compute_units)
        per_eu_128 = int(info.get("gpu_hw_threads_per_eu") or THREADS_PER_XVE[128])
        return max(1, eus * per_eu_128 * 128 // max(grf_count, 128))
    return CHIPS[NOMINAL_CHIP[target]].xves * THREADS_PER_XVE[256 if grf_count > 128 else 128]


def chip_figures(device: dpctl.SyclDevice | None, target: str) -> tuple[Chip, str]:
    """The chip figures for a device: the detected chip with dpctl's EU count and memory bandwidth where dpctl gives
    them (Level Zero), else the stated table; for a device that is no Xe2 GPU, the target's nominal chip."""
    chip_name = NOMINAL_CHIP.get(target, "BMG-G21")
    source = f"nominal {chip_name} (stated figures)"
    info: dict = {}
    if device is not None and getattr(device, "is_gpu", False):
        try:
            detected = detect(device)
            if detected.chip in CHIPS:
                chip_name, source = detected.chip, f"{detected.chip} ({detected.reason}; stated figures)"
        except TargetError:
            pass
        info = device_info(device)
    chip = CHIPS[chip_name]
    if info.get("gpu_eu_count") or info.get("max_mem_bandwidth"):
        cores = int(info["gpu_eu_count"]) // chip.xve_per_core if info.get("gpu_eu_count") else chip.xe_cores
        gbps = float(info["max_mem_bandwidth"]) / 1e9 if info.get("max_mem_bandwidth") else chip.mem_gbps
        chip = Chip(chip.name, cores, chip.clock_ghz, gbps, chip.note)
        source = f"{chip_name}: EU count / bandwidth from dpctl.utils.intel_device_info"
    return chip, source
