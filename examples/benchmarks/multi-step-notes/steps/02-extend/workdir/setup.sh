#!/bin/bash
# Runs before the step's agent, in the working folder: the first step's file must be there.
test -f notes.txt || { echo "notes.txt is missing: the first step did not run" >&2; exit 1; }
