#!/bin/bash
source /tests/lib.sh
if [ "$(cat /app/notes.txt 2>/dev/null)" = first ]; then reward yes; else reward no; fi
