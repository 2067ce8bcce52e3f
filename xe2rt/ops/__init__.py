"""One module per kernel family: input checks, launch geometry (nd_range, SLM) and the launch itself."""
