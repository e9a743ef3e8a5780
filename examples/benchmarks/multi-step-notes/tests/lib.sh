# Shared by every step's test.sh (the task's tests/ is uploaded under each step's).
reward() {
  if [ "$1" = yes ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
}
