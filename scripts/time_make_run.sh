#!/bin/bash
# How long `make run` takes on a fresh clone until the first page answers 200, with each line
# of its output stamped with the seconds since the start (where the time goes), and
# sum(range(10**6)) before and after for calibration. Stops the service it started.
#   scripts/time_make_run.sh [REPOSITORY] [BRANCH]     (default: this repository, its branch)
set -u
SRC=${1:-$(git rev-parse --show-toplevel)}
BRANCH=${2:-$(git -C "$SRC" rev-parse --abbrev-ref HEAD)}
WORK=$(mktemp -d /tmp/gpuqueue-make-run.XXXXXX)
chmod 755 "$WORK"  # make run as root hands the service to an unprivileged user, who must reach it
PORT=${GPUQUEUE_PORT:-8791}
git clone -q --branch "$BRANCH" "$SRC" "$WORK/clone"
cd "$WORK/clone" || exit 1
calibrate() { python3 -m timeit "sum(range(10**6))" | tail -1; }
BEFORE=$(calibrate)
T0=$(date +%s.%N)
since() { echo "$(date +%s.%N) - $T0" | bc; }
GPUQUEUE_PORT=$PORT GPUQUEUE_EMBEDDED_REDIS_PORT=${GPUQUEUE_EMBEDDED_REDIS_PORT:-6491} \
  setsid make run > "$WORK/run.log" 2>&1 &
RUN=$!
tail -F "$WORK/run.log" 2>/dev/null | while IFS= read -r line; do
  printf '%6.1f %s\n' "$(since)" "$line"
done > "$WORK/run.stamped" &
STAMPER=$!
until [ "$(curl -s -o /dev/null -w '%{http_code}' -L "http://127.0.0.1:$PORT/")" = 200 ]; do
  sleep 0.25
  if [ "$(echo "$(since) > 600" | bc)" = 1 ]; then echo "no answer in 600 s"; break; fi
done
ELAPSED=$(since)
cat "$WORK/run.stamped"
echo "first 200 after ${ELAPSED} s; sum(range(10**6)): ${BEFORE} before, $(calibrate) after"
kill -TERM -- "-$RUN" 2>/dev/null
wait "$RUN" 2>/dev/null
kill "$STAMPER" 2>/dev/null
echo "(the clone stays in $WORK/clone)"
