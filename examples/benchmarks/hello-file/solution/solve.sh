#!/bin/bash
# Runs from the task's working folder, /app.
printf 'Hello, world!\n' > hello.txt
