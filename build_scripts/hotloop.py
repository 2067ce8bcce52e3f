"""The static hot-loop report lives in the package: xe2rt/build/hotloop.py (`python -m xe2rt.build.hotloop DIR`)."""
import sys

import common  # noqa: F401  (this checkout's xe2rt first on sys.path)
from xe2rt.build.hotloop import *  # noqa: F401,F403
from xe2rt.build.hotloop import report_dir, report_file  # noqa: F401

if __name__ == "__main__":
    import json
    from pathlib import Path
    for d in sys.argv[1:]:
        print(json.dumps(report_dir(Path(d)), indent=1))
