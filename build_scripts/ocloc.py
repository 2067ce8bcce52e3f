"""Locating (or fetching) an Xe2-capable ocloc lives in the package: xe2rt/build/ocloc.py."""
import common  # noqa: F401  (this checkout's xe2rt first on sys.path)
from xe2rt.build.ocloc import DEFAULT_CACHE, Ocloc, find_ocloc  # noqa: F401

if __name__ == "__main__":
    tool = find_ocloc()
    print(tool.origin, tool.version())
