#!/bin/bash
source /tests/lib.sh
if [ "$(cat /app/notes.txt 2>/dev/null)" = "$(printf 'first\nsecond')" ]; then reward yes; else reward no; fi
