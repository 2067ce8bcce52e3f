"""Exception types. Each message states the rule, the offending value and, where there is one, the fix."""


class Xe2rtError(Exception):
    """Base class of every error xe2rt raises on purpose."""


class ConfigError(Xe2rtError, ValueError):
    """A bad XE2RT_* variable or target name."""


class InputError(Xe2rtError, ValueError):
    """An op argument breaks a rule (shape, layout, queue, value); nothing was launched."""


class InputTypeError(Xe2rtError, TypeError):
    """An op argument has the wrong type or dtype; nothing was launched."""


class TargetError(Xe2rtError, RuntimeError):
    """No kernel target fits the device, or the device lacks a capability the kernel needs."""


class ArtifactError(Xe2rtError, RuntimeError):
    """A shipped binary is missing, does not match its manifest, or failed to build for the device."""


class CompileError(Xe2rtError, RuntimeError):
    """OpenCL C source did not compile; the message carries the compiler's log with file:line."""


class LaunchLimitError(Xe2rtError, ValueError):
    """The launch geometry exceeds a device or kernel limit; the message gives the numbers."""


class BuildError(Xe2rtError, RuntimeError):
    """A kernel build failed (compiler message, missing file, bad spec); nothing was written."""
