#!/bin/bash
echo "SWEBench results starts here"
if [ "$(bash /app/greet.sh Ada)" = "Hello, Ada!" ] && [ "$(bash /app/greet.sh 'Grace Hopper')" = "Hello, Grace Hopper!" ]; then
  echo "PASSED"
else
  echo "FAILED"
fi
echo "SWEBench results ends here"
