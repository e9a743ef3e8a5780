#!/bin/bash
set -e
# The build step: the module must compile before its tests run.
python3 -m py_compile /app/stats.py
cd "$TEST_DIR"
python3 -m pytest -rA -p no:cacheprovider test_outputs.py
