"""Rank 0 prints COUNT metric lines, one every INTERVAL seconds, each stamped with the time it was written."""

import json
import os
import sys
import time

count, interval = int(sys.argv[1]), float(sys.argv[2])
if os.environ.get("RANK", "0") == "0":
    for step in range(1, count + 1):
        print(
            "CLOUDDDP_METRIC " + json.dumps({"step": step, "epoch": 1, "time": time.time(), "value": step}), flush=True
        )
        time.sleep(interval)
