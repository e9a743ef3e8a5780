#!/bin/bash
# pytest with a CTRF report (written by tests/conftest.py), then the reward from its exit code.
cd /tests
python3 -m pytest -rA -p no:cacheprovider test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
