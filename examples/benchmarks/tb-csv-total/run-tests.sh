#!/bin/bash
cd "$TEST_DIR"
python3 -m pytest -rA -p no:cacheprovider test_outputs.py
