#!/bin/bash
# pytest decides; the reward is its exit code. Nothing else writes a reward.
cd /tests
python3 -m pytest -p no:cacheprovider -rA test_answer.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
