#!/bin/bash
python3 - <<'PY'
import json
text = open("/app/input.txt").read()
json.dump({"words": len(text.split()), "lines": len(text.splitlines())}, open("/app/stats.json", "w"))
PY
