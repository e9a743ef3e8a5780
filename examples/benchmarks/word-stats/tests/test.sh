#!/bin/bash
# Two named rewards in reward.json: whether the counts are right, and whether the file has
# exactly the shape asked for.
python3 - <<'PY'
import json
text = open("/app/input.txt").read()
want = {"words": len(text.split()), "lines": len(text.splitlines())}
try:
    got = json.load(open("/app/stats.json"))
except Exception as err:
    print("stats.json:", err)
    got = None
shape = 1 if isinstance(got, dict) and set(got) == {"words", "lines"} else 0
right = 1 if isinstance(got, dict) and all(got.get(k) == v for k, v in want.items()) else 0
print("want", want, "got", got)
json.dump({"correctness": right, "format": shape}, open("/logs/verifier/reward.json", "w"))
PY
