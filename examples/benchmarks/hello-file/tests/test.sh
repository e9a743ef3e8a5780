#!/bin/bash
# A shell verifier: the reward is 1 when the file holds exactly the line asked for.
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo "hello.txt is right"
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong: $(head -c 200 /app/hello.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
