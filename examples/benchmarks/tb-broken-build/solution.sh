#!/bin/bash
cat > /app/stats.py <<'PY'
def mean(values):
    return sum(values) / len(values)
PY
