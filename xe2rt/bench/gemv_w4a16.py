"""W4A16 GEMV rows for `python -m xe2rt bench` (see xe2rt.bench.quant)."""
from .quant import cases_w4 as cases  # noqa: F401
