"""Everything is in pyproject.toml except the start-up hook, which setuptools cannot declare statically.

xe2rt_icd.pth goes to the top of site-packages. Python runs its one line at every start-up: when OCL_ICD_FILENAMES is
unset and the pip-installed Intel OpenCL CPU runtime is in the environment, it points the variable at that runtime,
so `opencl:cpu` exists for SYCL whether a script imports dpnp/dpctl or xe2rt first (xe2rt/_icd.py says why this must
happen before the first device query, and warns with the fix when it did not).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK = Path(__file__).resolve().parent / "xe2rt_icd.pth"


class build_py_with_hook(build_py):
    """Places the hook at the root of what is installed into site-packages.

    A regular wheel takes the root of build_lib. An editable wheel ignores build_lib and takes what is written to the
    install command's install_lib (its unpacked wheel; setuptools' data_files are not installed in editable mode)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        Path(root).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HOOK, Path(root, HOOK.name))


setup(cmdclass={"build_py": build_py_with_hook})
