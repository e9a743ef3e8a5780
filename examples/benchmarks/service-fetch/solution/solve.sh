#!/bin/bash
curl -fsS http://api:8000/secret | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])' > /app/token.txt
